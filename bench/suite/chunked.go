package suite

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// The chunked-metadata scenario: one thread of ThreadLength
// checkpoints of a WorkspaceFiles-file workspace, each changing 1% of the
// files (chosen uniformly, as bench/workload.Edit does: the worst case for
// chunks, every edit in a different place) and adding two 2 KB messages.
const (
	ThreadLength   = 200
	WorkspaceFiles = 20000
)

// chunkedWorkspace makes the first checkpoint's manifest: nested paths of
// about 36 bytes on average, like the generated benchmark tree's, sizes of
// 1–30 KB, a few empty directories and symlinks.
func chunkedWorkspace(r *rand.Rand) []chain.Entry {
	words := []string{"src", "lib", "internal", "api", "util", "core", "handlers", "models", "tests", "docs", "cmd", "pkg"}
	var files []chain.Entry
	for i := range WorkspaceFiles {
		p := fmt.Sprintf("%s/%s/%s/file_%05d.go", words[r.IntN(4)], words[4+r.IntN(4)], words[8+r.IntN(4)], i)
		files = append(files, chain.Entry{Path: p, Kind: chain.KindFile, BlobKey: blobKey("ws", i, 0), Size: int64(1000 + r.IntN(29000))})
	}
	for i := range 20 {
		files = append(files, chain.Entry{Path: fmt.Sprintf("empty/dir_%02d", i), Kind: chain.KindDir})
	}
	for i := range 10 {
		files = append(files, chain.Entry{Path: fmt.Sprintf("links/link_%02d", i), Kind: chain.KindSymlink, Target: "../" + files[i].Path})
	}
	slices.SortFunc(files, func(a, b chain.Entry) int { return strings.Compare(a.Path, b.Path) })
	return files
}

// chunkedThread returns the scenario's checkpoints, in append order.
func chunkedThread() []*chain.Checkpoint {
	r := rand.New(rand.NewPCG(7, 1))
	files := chunkedWorkspace(r)
	var fileIdx []int
	for i, f := range files {
		if f.Kind == chain.KindFile {
			fileIdx = append(fileIdx, i)
		}
	}
	var conv []json.RawMessage
	msg := func(n, role int) json.RawMessage {
		text := make([]byte, 2000)
		for i := range text {
			text[i] = "abcdefghij klmnopqrstuvwxyz"[r.IntN(27)]
		}
		return json.RawMessage(fmt.Sprintf(`{"role":%q,"turn":%d,"content":%q}`, []string{"user", "assistant"}[role], n, text))
	}
	cps := make([]*chain.Checkpoint, ThreadLength)
	parent := ""
	for n := range cps {
		if n > 0 {
			for _, j := range r.Perm(len(fileIdx))[:len(fileIdx)/100] {
				f := &files[fileIdx[j]]
				f.BlobKey, f.Size = blobKey("ws", fileIdx[j], n), f.Size+int64(r.IntN(200))
			}
		}
		conv = append(conv, msg(n, 0), msg(n, 1))
		cps[n] = &chain.Checkpoint{
			ID: fmt.Sprintf("cp%04d", n), ThreadID: "agent", ParentID: parent,
			CreatedAt: baseCreatedAt + int64(n), Reason: chain.ReasonAutomatic,
			Files: slices.Clone(files), Conversation: slices.Clone(conv),
		}
		parent = cps[n].ID
	}
	return cps
}

// ChunkedThread runs the scenario once per iteration on a durable store
// and, interleaved append by append, on the unchunked baseline: a plain
// bbolt file written as format 1 did, one sealed whole record, its index
// key and the head per Update (fsync on). It reports
//
//   - per-cp-%: the physical metadata bytes each checkpoint after the
//     first adds, as a percentage of that checkpoint stored whole (median
//     and maximum), and total-%: all of them against all stored whole;
//   - append-ratio: the median chunked Append over the median baseline
//     Update of the same checkpoints;
//   - get-ratio: Get of the head over the baseline's read of the whole
//     record (unseal, decode, validate);
//   - list-ms and list-live-MB: List of the thread, and the heap its
//     result holds; iter-live-MB: the most heap ListIter holds at once;
//   - deletehead-ms: DeleteHead of the head at the end.
func ChunkedThread(b *testing.B) {
	cps := chunkedThread()
	for b.Loop() {
		chunkedThreadOnce(b, cps)
	}
}

func chunkedThreadOnce(b *testing.B, cps []*chain.Checkpoint) {
	db := openDB(b, Durable())
	defer db.Close()
	raw := openRawBolt(b)
	l, err := db.AcquireWriter(ctx, "agent")
	if err != nil {
		b.Fatal(err)
	}
	var perCP []float64
	var appendNs, rawNs []float64
	var logical int64
	prev := int64(0)
	for n, cp := range cps {
		t0 := time.Now()
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: cp.ParentID, Writer: l.Writer}); err != nil {
			b.Fatal(err)
		}
		appendNs = append(appendNs, float64(time.Since(t0)))
		t0 = time.Now()
		if err := (kv.BoltDB{DB: raw}).Update(func(tx kv.Tx) error { return rawPutWhole(tx, cp) }); err != nil {
			b.Fatal(err)
		}
		rawNs = append(rawNs, float64(time.Since(t0)))
		s, err := db.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		whole := int64(chain.RecordSize(cp)) + 9
		logical += whole
		if n > 0 {
			perCP = append(perCP, 100*float64(s.PhysicalMetadataBytes-prev)/float64(whole))
		}
		prev = s.PhysicalMetadataBytes
	}
	head := cps[len(cps)-1].ID

	// Get of the head, and the baseline's whole-record read, alternated.
	var getNs, rawGetNs []float64
	for range 20 {
		t0 := time.Now()
		if _, err := db.Get(ctx, head); err != nil {
			b.Fatal(err)
		}
		getNs = append(getNs, float64(time.Since(t0)))
		t0 = time.Now()
		if err := (kv.BoltDB{DB: raw}).View(func(tx kv.Tx) error {
			p, err := meta.Unseal(meta.BucketCheckpoints, []byte(head), tx.Bucket(meta.BucketCheckpoints).Get([]byte(head)))
			if err != nil {
				return err
			}
			cp, err := meta.DecodeCheckpoint(p)
			if err != nil {
				return err
			}
			return chain.ValidateContent(cp)
		}); err != nil {
			b.Fatal(err)
		}
		rawGetNs = append(rawGetNs, float64(time.Since(t0)))
	}

	// Memory is measured live (after a collection), not as heap in use:
	// the 200 input checkpoints keep the collector's goal high, and the
	// garbage it lets pile up would swamp what List and ListIter hold.
	base := liveHeap()
	t0 := time.Now()
	list, err := db.List(ctx, "agent")
	listMs := float64(time.Since(t0).Microseconds()) / 1000
	if err != nil || len(list) != len(cps) {
		b.Fatalf("List: %d checkpoints, %v", len(list), err)
	}
	listPeak := float64(liveHeap() - base)
	runtime.KeepAlive(list)
	list = nil
	base = liveHeap()
	seen, iterPeak := 0, 0.0
	for cp, err := range db.ListIter(ctx, "agent") {
		if err != nil {
			b.Fatal(err)
		}
		if cp.ThreadID == "agent" {
			seen++
		}
		if seen%20 == 0 { // a collection costs a few ms: sample
			iterPeak = max(iterPeak, float64(liveHeap()-base))
		}
		runtime.KeepAlive(cp) // held while it is looked at, as a caller would
	}
	if seen != len(cps) {
		b.Fatalf("ListIter yielded %d checkpoints", seen)
	}

	s, err := db.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// DeleteHead of the head, which is pending, with up to 63 others: it
	// reads the chunk lists of every pending checkpoint to know which of
	// its chunks no one else uses.
	t0 = time.Now()
	if err := db.DeleteHead(ctx, "agent", head, l.Writer); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "deletehead-ms")
	b.ReportMetric(median(perCP), "per-cp-%-median")
	b.ReportMetric(slices.Max(perCP), "per-cp-%-max")
	b.ReportMetric(float64(1+slices.Index(perCP, slices.Max(perCP))), "per-cp-max-at")
	b.ReportMetric(percentile(perCP, 0.9), "per-cp-%-p90")
	b.ReportMetric(100*float64(s.PhysicalMetadataBytes)/float64(logical), "total-%")
	b.ReportMetric(float64(logical)/1e6, "logical-MB")
	b.ReportMetric(float64(s.PhysicalMetadataBytes)/1e6, "physical-MB")
	b.ReportMetric(median(appendNs)/1e6, "append-ms")
	b.ReportMetric(slices.Max(appendNs)/1e6, "append-ms-max") // a fold of 64 pending
	b.ReportMetric(median(rawNs)/1e6, "unchunked-append-ms")
	b.ReportMetric(median(appendNs)/median(rawNs), "append-ratio")
	b.ReportMetric(median(getNs)/1e6, "get-ms")
	b.ReportMetric(median(rawGetNs)/1e6, "unchunked-get-ms")
	b.ReportMetric(median(getNs)/median(rawGetNs), "get-ratio")
	b.ReportMetric(listMs, "list-ms")
	b.ReportMetric(listPeak/1e6, "list-live-MB")
	b.ReportMetric(iterPeak/1e6, "iter-live-MB")
}

func median(v []float64) float64 { return percentile(v, 0.5) }

// percentile returns the value at fraction q of v sorted (nearest rank).
func percentile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// liveHeap collects garbage and returns the heap still in use.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
