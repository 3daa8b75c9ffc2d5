#!/bin/sh
# Checks contrib/systemd/sbxdb.service with systemd-analyze verify, against
# the sbxdb binary given (the unit names /usr/local/bin/sbxdb, which verify
# requires to exist): any complaint, even one verify only warns about,
# fails.
set -eu
bin=${1:?usage: verify.sh PATH-TO-SBXDB}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s#/usr/local/bin/sbxdb#$bin#" "$(dirname "$0")/sbxdb.service" > "$dir/sbxdb.service"
out=$(systemd-analyze verify "$dir/sbxdb.service" 2>&1) || { echo "$out"; exit 1; }
if [ -n "$out" ]; then echo "$out"; exit 1; fi
echo "sbxdb.service: verified"
