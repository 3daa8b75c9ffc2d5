#!/bin/sh
# install.sh CACHE_DIR: builds versitygw, the S3 server the S3 tests run
# (see s3test.go), into CACHE_DIR once and prints the binary's path. A later
# call finds it there and only prints the path. Use it as
#
#   SBXDB_VERSITYGW=$(sh internal/testkit/s3test/install.sh "$CACHE")
#
# The build goes through the Go module proxy; cold, it takes about two
# minutes on two cores. Its progress goes to stderr, the path to stdout.
set -eu
version=v1.8.0
cache=${1:?usage: install.sh CACHE_DIR}
dir=$cache/versitygw-$version
bin=$dir/versitygw
if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	# Outside any module, so the project's go.mod plays no part.
	(cd "$tmp" && GOBIN="$tmp/bin" GOFLAGS=-buildvcs=false go install "github.com/versity/versitygw/cmd/versitygw@$version") >&2
	mkdir -p "$tmp/out"
	mv "$tmp/bin/versitygw" "$tmp/out/versitygw"
	# A rename, so a build cut short never leaves a binary behind.
	mv "$tmp/out" "$dir" 2>/dev/null || [ -x "$bin" ]
fi
echo "$bin"
