#!/usr/bin/env bash
# Runs every fuzz target of sbxdb in turn for DURATION each (default 10s).
#
#   bash fuzz/run.sh          # 10 s each: what CI runs
#   bash fuzz/run.sh 10m      # the long run
#
# Each target runs with -parallel ${PARALLEL:-2} and spends at most
# ${MINIMIZE:-5s} minimizing each new input (Go's default, 60 s, eats short
# runs of the slower targets). A failure stops the script; Go has written
# the failing input under the package's testdata/fuzz/<Target>/ (replay it
# with go test -run '<Target>/<file>').
#
# The fuzzing runs on Go ${FUZZ_TOOLCHAIN:-go1.27.3}, which the go command
# fetches from the module proxy once. Go 1.26's fuzzing coordinator can
# fail a duration-bounded run with "context deadline exceeded" and no
# failing input when the deadline lands while a worker is busy
# (go.dev/issue/75804, fixed in Go 1.27); a loaded 2-core machine hits it.
# The module itself builds with the Go its go.mod names.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
PARALLEL=${PARALLEL:-2}
MINIMIZE=${MINIMIZE:-5s}
export GOTOOLCHAIN=${FUZZ_TOOLCHAIN:-go1.27.3}

# package:target, every Fuzz function of the repository.
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
	pkg=$(dirname "$f")
	grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func |$pkg:|"
done | sort)

# fuzz runs one target; a failure has written its input under testdata.
fuzz() {
	go test "$1" -run '^$' -fuzz "^${2}\$" -fuzztime "$DURATION" -fuzzminimizetime "$MINIMIZE" -parallel "$PARALLEL"
}

for t in $targets; do
	pkg=${t%%:*}
	name=${t##*:}
	echo "== $name ($pkg) for $DURATION"
	fuzz "$pkg" "$name"
done
