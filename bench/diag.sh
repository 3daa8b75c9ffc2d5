#!/usr/bin/env bash
# Diagnostics behind the engine-core figures; not part of run.sh.
#
#   bash bench/diag.sh        # needs strace; about 1–2 minutes
#
# For each write benchmark at a fixed N appends it counts fdatasync and
# pwrite64 calls and the bytes written (strace), which gives the committed
# transactions per append (bbolt makes two fdatasyncs per commit) without
# exporting the engine's counter; then it takes CPU profiles of the serial
# append and of 64 writers. Writes bench/results/engine-core-diag.txt.
set -euo pipefail

cd "$(dirname "$0")/.."
N=${N:-3000}
out=bench/results/engine-core-diag.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p bench/results
go test -c -o "$tmp/bench.test" ./bench

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "N (appends per benchmark, plus b.N=1 warm-up and setup): $N"
	echo
	printf "%-32s %10s %10s %10s %12s %11s %11s\n" benchmark appends/s fdatasync pwrite64 KiB-written txs/append KiB/append
	for bn in 'RawBoltUpdate$' 'RawBoltUpdateRefs$' 'AppendSerial$' 'AppendConcurrent/writers=8$' 'AppendConcurrent/writers=64$'; do
		res=$(strace -f --seccomp-bpf -e trace=fdatasync,pwrite64 -e verbose=none -s 0 -o "$tmp/strace.txt" \
			"$tmp/bench.test" -test.run '^$' -test.bench "$bn" -test.benchtime "${N}x" | awk '/^Benchmark/ {print $5}')
		awk -v bn="$bn" -v rate="$res" -v n="$N" '
			/fdatasync\(/ { syncs++ }
			/pwrite64\(/ { writes++; bytes += $NF }
			END { printf "%-32s %10s %10d %10d %12.0f %11.3f %11.1f\n", bn, rate, syncs, writes, bytes/1024, syncs/2/n, bytes/1024/n }' "$tmp/strace.txt"
	done
	echo
	echo "(rates above are slowed by strace; counts are what matter. txs/append is"
	echo " fdatasync/2/N: bbolt syncs twice per commit. Counts include setup: the"
	echo " leases, and for the concurrent ones a b.N=1 warm-up on its own store.)"
	for bn in 'AppendSerial$' 'AppendConcurrent/writers=64$'; do
		echo
		echo "== CPU profile, $bn, -benchtime 3s (top by cumulative time) =="
		"$tmp/bench.test" -test.run '^$' -test.bench "$bn" -test.benchtime 3s -test.cpuprofile "$tmp/cpu.out" | grep '^Benchmark'
		go tool pprof -top -cum -nodecount 30 "$tmp/bench.test" "$tmp/cpu.out" 2>/dev/null | sed -n '4,40p'
	done
} | tee "$out"
