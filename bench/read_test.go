package bench

import "testing"

// BenchmarkGetHead1000Files is Get of a thread's head checkpoint that has
// 1,000 file entries (the chain holds 20 such checkpoints).
func BenchmarkGetHead1000Files(b *testing.B) {
	db, head := filledStore(b, 20, 1000)
	b.ReportAllocs()
	for b.Loop() {
		cp, err := db.Get(ctx, head)
		if err != nil {
			b.Fatal(err)
		}
		if cp == nil || len(cp.Files) != 1000 {
			b.Fatalf("Get(%s) returned %v", head, cp)
		}
	}
}

// BenchmarkList1000 is List of a thread of 1,000 small checkpoints (10
// files, 2 messages each).
func BenchmarkList1000(b *testing.B) {
	db, _ := filledStore(b, 1000, smallFiles)
	b.ReportAllocs()
	for b.Loop() {
		cps, err := db.List(ctx, "w00")
		if err != nil {
			b.Fatal(err)
		}
		if len(cps) != 1000 {
			b.Fatalf("List returned %d checkpoints", len(cps))
		}
	}
}
