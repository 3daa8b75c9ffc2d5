#!/bin/sh
# ab.sh: engine-core benchmarks on this tree (format 3: small manifests
# inline, pending references weighed, folded at 1,024 or at 64 per thread)
# and on the format-2
# engine (commit b39cfe5: every manifest in chunks, folded every 64
# checkpoints), alternated in one session, so that the ratios compare
# engines measured side by side on this noisy machine.
#
# usage: bench/format2/ab.sh [rounds] [benchmark regexp] [benchtime]
#        (from the repository root; default: 3 rounds of Paired, 20x)
set -eu
rounds=${1:-3}
bench=${2:-Paired}
benchtime=${3:-20x}
root=$(pwd)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/v2" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -f "$work/v2" b39cfe5 >/dev/null 2>&1
go test -c -o "$work/v3.test" ./bench
(cd "$work/v2" && go test -c -o "$work/v2.test" ./bench)
cd "$work"
for _ in $(seq "$rounds"); do
  ./v3.test -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" | grep Benchmark | sed 's/^/format3 /'
  ./v2.test -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" | grep Benchmark | sed 's/^/format2 /'
done
