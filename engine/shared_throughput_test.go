package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
	"github.com/sbxdb/sbxdb/lease"
)

// TestSharedAppendThroughput is a measuring harness, not a check: with
// SBXDB_SHARED_THROUGHPUT set (seconds per run), 64 writers append to 64
// threads, one writer per thread, through one engine handle and then
// through two on one database, and it logs the appends per second each
// acknowledged (durable: PostgreSQL's COMMIT returned). Skipped otherwise.
func TestSharedAppendThroughput(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("SBXDB_SHARED_THROUGHPUT"))
	if secs <= 0 {
		t.Skip("set SBXDB_SHARED_THROUGHPUT=seconds to measure")
	}
	for _, handles := range []int{1, 2} {
		rate := sharedAppendRate(t, handles, 64, time.Duration(secs)*time.Second)
		t.Logf("%d handle(s), 64 writers on 64 threads: %.0f appends/s", handles, rate)
	}
}

func sharedAppendRate(t *testing.T, handles, writers int, d time.Duration) float64 {
	ctx := t.Context()
	url := pgtest.URL(t)
	dbs := make([]*engine.DB, handles)
	for i := range dbs {
		dir := t.TempDir()
		if i > 0 {
			id, _ := os.ReadFile(filepath.Join(filepath.Dir(dbs[0].Dir()), filepath.Base(dbs[0].Dir()), "blobs-id"))
			os.WriteFile(filepath.Join(dir, "blobs-id"), id, 0o644)
		}
		db, err := engine.Open(dir, &engine.Options{Metadata: url, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs[i] = db
	}
	leases := make([]*lease.Lease, writers)
	for w := range writers {
		l, err := dbs[w%handles].AcquireWriter(ctx, fmt.Sprintf("t%02d", w))
		if err != nil {
			t.Fatal(err)
		}
		leases[w] = l
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, thread, head := dbs[w%handles], fmt.Sprintf("t%02d", w), ""
			for i := 0; time.Now().Before(stop); i++ {
				id := fmt.Sprintf("c%02d-%06d", w, i)
				_, err := db.Append(ctx, chain.AppendInput{Writer: leases[w].Writer, ExpectedHeadID: head,
					Checkpoint: &chain.Checkpoint{ID: id, ThreadID: thread, ParentID: head, CreatedAt: int64(i + 1), Reason: chain.ReasonAutomatic}})
				if err != nil {
					t.Error(err)
					return
				}
				head = id
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}
