package bench

import (
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Appends per phase of one BenchmarkPaired round. The concurrent phases
// make more appends so that each writer makes 20 or more and the ramp at
// the start and the tail at the end of a phase weigh little.
const (
	pairedSerial = 100
	pairedW8     = 400
	pairedW64    = 1280
)

// BenchmarkPaired measures the four write paths of the ratios in
// alternation: each op (b.Loop iteration) is one round of pairedSerial raw
// bbolt updates, pairedSerial serial appends, pairedW8 appends by 8 writers
// and pairedW64 by 64 writers, each on its own store, the phase order
// rotating every round. The fsync time of this machine drifts within
// seconds, which a ratio of two benchmarks run a minute apart absorbs; here
// both sides of each ratio share every stretch of the run. It reports each
// path's appends/s and the three ratios of the engine's performance targets
// (ns/op is the time of a whole round and means little).
func BenchmarkPaired(b *testing.B) {
	raw := openRawBolt(b)
	rawGen := newGen("w00", smallFiles)
	serialDB := openDB(b, durable())
	serial := writers(b, serialDB, 1, smallFiles)
	db8 := openDB(b, durable())
	w8 := writers(b, db8, 8, smallFiles)
	db64 := openDB(b, durable())
	w64 := writers(b, db64, 64, smallFiles)

	var elapsed [4]time.Duration
	phases := [4]func() (time.Duration, error){
		func() (time.Duration, error) {
			start := time.Now()
			for range pairedSerial {
				cp := rawGen.next()
				if err := raw.Update(func(tx *bolt.Tx) error { return rawPut(tx, cp) }); err != nil {
					return 0, err
				}
				rawGen.head = cp.ID
			}
			return time.Since(start), nil
		},
		func() (time.Duration, error) { return appendConcurrently(serialDB, serial, pairedSerial) },
		func() (time.Duration, error) { return appendConcurrently(db8, w8, pairedW8) },
		func() (time.Duration, error) { return appendConcurrently(db64, w64, pairedW64) },
	}
	round := 0
	for b.Loop() {
		for i := range phases {
			p := (round + i) % len(phases)
			d, err := phases[p]()
			if err != nil {
				b.Fatal(err)
			}
			elapsed[p] += d
		}
		round++
	}
	rate := func(n int, d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
	rawRate := rate(pairedSerial, elapsed[0])
	serialRate := rate(pairedSerial, elapsed[1])
	rate8 := rate(pairedW8, elapsed[2])
	rate64 := rate(pairedW64, elapsed[3])
	b.ReportMetric(rawRate, "raw-appends/s")
	b.ReportMetric(serialRate, "serial-appends/s")
	b.ReportMetric(rate8, "w8-appends/s")
	b.ReportMetric(rate64, "w64-appends/s")
	b.ReportMetric(serialRate/rawRate, "serial/raw")
	b.ReportMetric(rate8/serialRate, "w8/serial")
	b.ReportMetric(rate64/serialRate, "w64/serial")
}
