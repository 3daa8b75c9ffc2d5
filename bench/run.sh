#!/usr/bin/env bash
# Runs the engine-core benchmarks and summarises them.
#
#   bash bench/run.sh            # from the repository root or from bench/
#
# Writes:
#   bench/results/engine-core.txt            raw `go test -bench` output, with
#                                            machine facts as header lines
#   bench/results/engine-core-summary.txt    median and min–max of each metric
#                                            over the runs, and the target ratios
#                                            computed from those medians
#   bench/results/engine-core-benchstat.txt  benchstat's table, when benchstat
#                                            can be fetched (not needed: the
#                                            summary above is computed with awk)
#
# COUNT and BENCHTIME may be overridden from the environment; the defaults
# take about 4–5 minutes on a 2-core machine. The benchmark bodies live in
# bench/suite, shared with the one benchmark command (bench/cmd/sbxbench).
set -euo pipefail

cd "$(dirname "$0")/.."
COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-3s}
BENCHSTAT=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
out=${OUT:-bench/results} # OUT=/tmp/x writes the results elsewhere
raw=$out/engine-core.txt
summary=$out/engine-core-summary.txt
mkdir -p "$out"

cmd=(go test ./bench -run '^$' -bench . -benchmem -count "$COUNT" -benchtime="$BENCHTIME" -timeout 30m)
{
	echo "command: ${cmd[*]}"
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "nproc: $(nproc)"
	echo "cpu-model: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "go-version: $(go version)"
	echo "kernel: $(uname -r)"
	echo "tmpdir-fs: $(df -T "${TMPDIR:-/tmp}" | awk 'NR==2 {print $2}')"
} >"$raw"
echo "running: ${cmd[*]}" >&2
start=$(date +%s)
"${cmd[@]}" | tee -a "$raw"
echo "wall-seconds: $(($(date +%s) - start))" >>"$raw"

# Median and min–max of every metric of every benchmark, then the ratios of
# the engine's targets from the medians of this same run.
awk '
function median(list,   a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1]+0 > a[j]+0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	lo[0] = a[1]; hi[0] = a[n]; cnt[0] = n
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function verdict(r, target) { return r >= target ? "met" : "NOT met" }
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	if (!(name in seen)) { seen[name] = 1; order[++nb] = name }
	for (i = 3; i < NF; i += 2) {
		key = name SUBSEP $(i+1)
		if (!(key in vals)) { units[name] = units[name] " " $(i+1) }
		vals[key] = vals[key] " " $i
	}
}
END {
	printf "%-40s %-18s %14s %14s %14s %4s\n", "benchmark", "metric", "median", "min", "max", "runs"
	for (b = 1; b <= nb; b++) {
		name = order[b]
		nu = split(units[name], us, " ")
		for (u = 1; u <= nu; u++) {
			m = median(vals[name SUBSEP us[u]])
			med[name SUBSEP us[u]] = m
			printf "%-40s %-18s %14.4g %14.4g %14.4g %4d\n", name, us[u], m, lo[0], hi[0], cnt[0]
		}
	}
	print ""
	print "Target ratios, from the medians above (appends/s):"
	raw = med["BenchmarkRawBoltUpdate" SUBSEP "appends/s"]
	ser = med["BenchmarkAppendSerial" SUBSEP "appends/s"]
	w8 = med["BenchmarkAppendConcurrent/writers=8" SUBSEP "appends/s"]
	w64 = med["BenchmarkAppendConcurrent/writers=64" SUBSEP "appends/s"]
	refs = med["BenchmarkRawBoltUpdateRefs" SUBSEP "appends/s"]
	if (raw > 0 && ser > 0) printf "  serial append / raw bbolt      %.3fx  (target >= 0.8x: %s)\n", ser/raw, verdict(ser/raw, 0.8)
	if (ser > 0 && w64 > 0) printf "  64 writers / serial            %.3fx  (target >= 2.5x: %s)\n", w64/ser, verdict(w64/ser, 2.5)
	if (ser > 0 && w8 > 0)  printf "  8 writers / serial             %.3fx  (target >= 1.0x: %s)\n", w8/ser, verdict(w8/ser, 1.0)
	if (refs > 0 && ser > 0) printf "  serial append / raw+refs (diagnostic)  %.3fx\n", ser/refs
	p = "BenchmarkPaired"
	if ((p SUBSEP "serial/raw") in med) {
		print ""
		print "Paired (alternating rounds, medians of the per-run ratios):"
		printf "  serial/raw %.3fx   w64/serial %.3fx   w8/serial %.3fx\n", med[p SUBSEP "serial/raw"], med[p SUBSEP "w64/serial"], med[p SUBSEP "w8/serial"]
	}
}' "$raw" | tee "$summary"

# benchstat, if the module proxy can provide it (-confidence 0.9: at 0.95 it
# needs 6 runs for an interval). `go run pkg@version` does
# not touch this module's go.mod.
if go run "$BENCHSTAT" -confidence 0.9 "$raw" >"$out/engine-core-benchstat.txt" 2>/dev/null; then
	echo "benchstat: $out/engine-core-benchstat.txt" >&2
else
	rm -f "$out/engine-core-benchstat.txt"
	echo "benchstat unavailable; see $summary" >&2
fi
