#!/bin/sh
# ab.sh: the chunked-metadata scenario on the format-2 engine (this tree)
# and on the format-1 engine (commit bca554f, the last that stored whole
# records), alternated three times in one session, so that the Append and
# Get ratios of issue 7 compare engines measured side by side.
#
# usage: bench/format1/ab.sh [rounds]    (from the repository root)
set -eu
rounds=${1:-3}
root=$(pwd)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/v1" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -f "$work/v1" bca554f >/dev/null 2>&1
# The same scenario, trimmed to what the format-1 engine has.
cp bench/format1/chunked.go.in "$work/v1/bench/suite/chunked.go"
cp bench/chunked_test.go "$work/v1/bench/chunked_test.go"
go test -c -o "$work/v2.test" ./bench
(cd "$work/v1" && go test -c -o "$work/v1.test" ./bench)
cd "$work"
for _ in $(seq "$rounds"); do
  ./v2.test -test.run '^$' -test.bench BenchmarkChunkedThread -test.benchtime 1x | grep Benchmark | sed 's/^/format2 /'
  ./v1.test -test.run '^$' -test.bench BenchmarkChunkedThread -test.benchtime 1x | grep Benchmark | sed 's/^/format1 /'
done
