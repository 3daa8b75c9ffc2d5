package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/bench/suite"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// openSize is one store of the Open rows: its name in row IDs and labels,
// and the size its sbx.db is grown to.
type openSize struct {
	id, label string
	bytes     int64
}

// openSizes are the stores Open is timed on: ~16 MB, ~256 MB and ~1 GB of
// sbx.db; --quick stops at 256 MB, --smoke at 16 MB (the IDs stay).
func openSizes(quick, smoke bool) []openSize {
	s := []openSize{{"16mb", "16 MB", 16 << 20}, {"256mb", "256 MB", 256 << 20}, {"1gb", "1 GB", 1 << 30}}
	switch {
	case smoke:
		s[0] = openSize{"16mb", "4 MB (--smoke: not 16 MB)", 4 << 20}
		s[1] = openSize{"256mb", "8 MB (--smoke: not 256 MB)", 8 << 20}
		s[2] = openSize{"1gb", "16 MB (--smoke: not 1 GB)", 16 << 20}
	case quick:
		s[2] = openSize{"1gb", "256 MB (--quick: not 1 GB)", 256 << 20}
		s[1] = openSize{"256mb", "64 MB (--quick: not 256 MB)", 64 << 20}
	}
	return s
}

// buildOpenStores makes one store per size under dir, each a valid store
// (engine.Open and DB.Check accept it): store 0 is a capture of tree, then
// checkpoints that reuse its manifest under a new top directory each, so
// every one stores new chunks and the database grows by about its
// manifest's size; each next store is a copy of the previous one, grown
// further. Appends come from up to 8 writers at once, on threads of their
// own, without fsync (the store is synced once at the end). It returns the
// store directories and the sizes of their sbx.db.
func buildOpenStores(ctx context.Context, dir, tree string, sizes []openSize) ([]string, []int64, error) {
	t0 := time.Now()
	stores := make([]string, len(sizes))
	got := make([]int64, len(sizes))
	for i, sz := range sizes {
		stores[i] = filepath.Join(dir, "open-"+sz.id)
		if i == 0 {
			db, err := engine.Open(stores[0], &engine.Options{NoSync: true})
			if err != nil {
				return nil, nil, err
			}
			w, err := db.AcquireWriter(ctx, "open")
			if err == nil {
				_, err = db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: tree, Policy: allFiles})
			}
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, nil, err
			}
		} else if err := suite.CopyTree(stores[i-1], stores[i]); err != nil {
			return nil, nil, err
		}
		n, err := growStore(ctx, stores[i], sz.bytes)
		if err != nil {
			return nil, nil, err
		}
		got[i] = n
	}
	settle()
	progress("built the Open stores (%v) in %v", got, time.Since(t0).Round(time.Millisecond))
	return stores, got, nil
}

// growStore appends checkpoints to the store until its sbx.db holds at
// least size bytes, and returns the file's size.
func growStore(ctx context.Context, store string, size int64) (int64, error) {
	dbFile := filepath.Join(store, engine.DBFile)
	fi, err := os.Stat(dbFile)
	if err != nil {
		return 0, err
	}
	if fi.Size() >= size {
		return fi.Size(), nil
	}
	db, err := engine.Open(store, &engine.Options{NoSync: true, LeaseDuration: time.Hour, RenewAfter: time.Minute})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	head, err := db.Head(ctx, "open")
	if err != nil {
		return 0, err
	}
	base, err := db.Get(ctx, head)
	if err != nil {
		return 0, err
	}
	// Rounds of one checkpoint per writer; fewer writers near the size, as
	// far as the growth per checkpoint so far tells (bbolt grows the file
	// in steps, so it may still overshoot by one).
	const writers = 8
	start, appended := fi.Size(), int64(0)
	for fi.Size() < size {
		n := int64(writers)
		if per := (fi.Size() - start) / max(appended, 1); per > 0 {
			n = min(writers, max(1, (size-fi.Size())/per))
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for w := range n {
			wg.Go(func() { errs[w] = appendBatch(ctx, db, base, fmt.Sprintf("open-w%d", w), 1) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		appended += n
		if fi, err = os.Stat(dbFile); err != nil {
			return 0, err
		}
	}
	return fi.Size(), db.Close()
}

// appendBatch appends n checkpoints to thread, each base's manifest under a
// new top directory.
func appendBatch(ctx context.Context, db *engine.DB, base *chain.Checkpoint, thread string, n int) error {
	l, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		return err
	}
	defer l.Release(ctx)
	head, err := db.Head(ctx, thread)
	if err != nil {
		return err
	}
	files := slices.Clone(base.Files)
	for range n {
		top := fmt.Sprintf("%s-%d", thread, time.Now().UnixNano())
		for i, e := range base.Files {
			files[i].Path = top + "/" + e.Path
		}
		cp := &chain.Checkpoint{ID: top, ThreadID: thread, ParentID: head, CreatedAt: base.CreatedAt,
			Reason: chain.ReasonAutomatic, Files: files}
		if head, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: cp.ParentID, Writer: l.Writer}); err != nil {
			return err
		}
	}
	return nil
}

// openBench times Open + Close of each store (read-write, as `sbxdb
// capture` opens it) and `sbxdb threads` on the largest as a whole
// process, after checking once that every store passes DB.Check.
func openBench(ctx context.Context, rep *Report, cfg *config, tree, cli string) error {
	sizes := openSizes(cfg.quick, cfg.smoke)
	stores, got, err := buildOpenStores(ctx, cfg.work, tree, sizes)
	if err != nil {
		return err
	}
	for i, s := range stores {
		db, err := engine.Open(s, &engine.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		r, err := db.Check(ctx, sbxdb.CheckStoreOptions{})
		db.Close()
		if err != nil {
			return err
		}
		if !r.Clean() {
			return fmt.Errorf("the %s Open store does not pass check: %+v", sizes[i].label, r.Findings[0])
		}
	}
	vals, roVals := make([][]float64, len(stores)), make([][]float64, len(stores))
	var threads []float64
	for run := range cfg.runs {
		progress("Open, run %d of %d", run+1, cfg.runs)
		for i, s := range stores {
			t := time.Now()
			db, err := engine.Open(s, nil)
			if err != nil {
				return err
			}
			if err := db.Close(); err != nil {
				return err
			}
			vals[i] = append(vals[i], time.Since(t).Seconds()*1000)
			t = time.Now()
			if db, err = engine.Open(s, &engine.Options{ReadOnly: true}); err != nil {
				return err
			}
			if err := db.Close(); err != nil {
				return err
			}
			roVals[i] = append(roVals[i], time.Since(t).Seconds()*1000)
		}
		if cli != "" {
			t := time.Now()
			if out, err := exec.Command(cli, "threads", "--db", stores[len(stores)-1]).CombinedOutput(); err != nil {
				return fmt.Errorf("sbxdb threads: %v: %s", err, out)
			}
			threads = append(threads, time.Since(t).Seconds()*1000)
		}
	}
	rep.setSection("Open + Close of a store (read-write, as `sbxdb capture` opens it), by size of sbx.db")
	for i, sz := range sizes {
		rep.add("open."+sz.id, fmt.Sprintf("Open + Close, %s store", sz.label), "ms", vals[i],
			fmt.Sprintf("sbx.db %s MB; passes check", num(float64(got[i])/1e6)))
	}
	last := "open." + sizes[len(sizes)-1].id
	rep.ratio(rep.byID[last], "open."+sizes[0].id, "÷ "+sizes[0].label)
	for i, sz := range sizes {
		rep.add("open.ro."+sz.id, fmt.Sprintf("read-only Open + Close, %s store", sz.label), "ms", roVals[i], "as `sbxdb threads`, ls and check open it")
	}
	if len(threads) > 0 {
		rep.add("open.threads_cli", fmt.Sprintf("`sbxdb threads`, %s store (whole process)", sizes[len(sizes)-1].label), "ms", threads, "")
	} else {
		rep.missing("open.threads_cli", "`sbxdb threads` (whole process)", "ms", "the CLI did not build")
	}
	return nil
}
