#!/usr/bin/env bash
# Runs every fuzz target of sbxdb in turn for DURATION each (default 10s).
#
#   bash fuzz/run.sh          # 10 s each: what CI runs
#   bash fuzz/run.sh 10m      # the long run
#
# Each target runs with -parallel ${PARALLEL:-2} and spends at most
# ${MINIMIZE:-5s} minimizing each new input (Go's default, 60 s, eats short
# runs of the slower targets). A failure stops the script (but see the
# retry below);
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

# fuzz runs one target, showing its output; the output is also kept in $log.
fuzz() {
	go test "$1" -run '^$' -fuzz "^${2}\$" -fuzztime "$DURATION" -fuzzminimizetime "$MINIMIZE" -parallel "$PARALLEL" 2>&1 | tee "$log"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in $targets; do
	pkg=${t%%:*}
	name=${t##*:}
	echo "== $name ($pkg) for $DURATION"
	corpus="$pkg/testdata/fuzz/$name"
	before=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
	if fuzz "$pkg" "$name"; then
		continue
	fi
	# Go's fuzzing coordinator sometimes gives up on a busy worker at the
	# end of the run with "context deadline exceeded" and no failing
	# input. That says nothing of the code: run the target once more. A
	# real failure writes its input under testdata and stops here.
	after=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
	if [ "$after" = "$before" ] && grep -q 'context deadline exceeded' "$log"; then
		echo "== $name: the fuzzing engine timed out without a failing input; once more"
		fuzz "$pkg" "$name" || exit 1
		continue
	fi
	exit 1
done
