#!/usr/bin/env bash
# Runs every fuzz target of sbxdb in turn for DURATION each (default 10s).
#
#   bash fuzz/run.sh          # 10 s each: what CI runs
#   bash fuzz/run.sh 10m      # the long run
#
# Each target runs with -parallel ${PARALLEL:-2} and spends at most
# ${MINIMIZE:-5s} minimizing each new input (Go's default, 60 s, eats short
# runs of the slower targets). A failure stops the script;
# Go has written the failing input under the package's testdata/fuzz/<Target>/
# (replay it with go test -run '<Target>/<file>').
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
PARALLEL=${PARALLEL:-2}
MINIMIZE=${MINIMIZE:-5s}

# package:target, every Fuzz function of the repository.
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
	pkg=$(dirname "$f")
	grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func |$pkg:|"
done | sort)

for t in $targets; do
	pkg=${t%%:*}
	name=${t##*:}
	echo "== $name ($pkg) for $DURATION"
	go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$DURATION" -fuzzminimizetime "$MINIMIZE" -parallel "$PARALLEL"
done
