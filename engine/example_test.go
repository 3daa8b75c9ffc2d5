package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// A host takes the thread's writer lease, appends a checkpoint on the
// current head, and releases the lease.
func Example() {
	dir, _ := os.MkdirTemp("", "sbxdb-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	db, err := engine.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	w, err := db.AcquireWriter(ctx, "thread-1")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Release(ctx)

	head, _ := db.Head(ctx, "thread-1") // "" for an empty thread
	_, err = db.Append(ctx, chain.AppendInput{
		Checkpoint: &chain.Checkpoint{
			ID: "run-1", ThreadID: "thread-1", ParentID: head,
			CreatedAt: 1_700_000_000_000, Reason: chain.ReasonAutomatic,
			Files: []chain.Entry{{
				Path: "hello.txt", Kind: chain.KindFile, Size: 5,
				BlobKey: "sandbox-files/sha256/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
			}},
			Conversation: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
		},
		ExpectedHeadID: head,
		Writer:         w.Writer,
	})
	if err != nil {
		log.Fatal(err)
	}

	// A second append on the old head loses the compare-and-swap.
	_, err = db.Append(ctx, chain.AppendInput{
		Checkpoint: &chain.Checkpoint{ID: "run-2", ThreadID: "thread-1", CreatedAt: 1, Reason: chain.ReasonAutomatic},
		Writer:     w.Writer,
	})
	fmt.Println(chain.Code(err))

	head, _ = db.Head(ctx, "thread-1")
	refs, _ := db.BlobReferences(ctx)
	fmt.Println(head, len(refs), refs[0].References)
	// Output:
	// SANDBOX_SNAPSHOT_STALE_HEAD
	// run-1 1 1
}

// ListIter walks a thread one checkpoint at a time; Stats shows how much the
// checkpoints share. Ten checkpoints that each change one of 100 files store
// their manifest chunks once and only the changed ones again.
func ExampleDB_ListIter() {
	dir, _ := os.MkdirTemp("", "sbxdb-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := engine.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	w, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		log.Fatal(err)
	}
	files := make([]chain.Entry, 100)
	for i := range files {
		files[i] = chain.Entry{Path: fmt.Sprintf("src/file%03d.go", i), Kind: chain.KindFile, Size: 1,
			BlobKey: fmt.Sprintf("%s%064x", chain.FilePrefix, i)}
	}
	parent := ""
	for n := range 10 {
		files[n*7].BlobKey = fmt.Sprintf("%s%064x", chain.FilePrefix, 1000+n) // one file changes
		cp := &chain.Checkpoint{ID: fmt.Sprint("cp", n), ThreadID: "t", ParentID: parent, CreatedAt: int64(n),
			Reason: chain.ReasonAutomatic, Files: append([]chain.Entry(nil), files...)}
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: parent, Writer: w.Writer}); err != nil {
			log.Fatal(err)
		}
		parent = cp.ID
	}
	for cp, err := range db.ListIter(ctx, "t") {
		if err != nil {
			log.Fatal(err)
		}
		if cp.ID == "cp9" {
			fmt.Println(cp.ID, len(cp.Files), cp.Files[63].BlobKey[len(chain.FilePrefix)+61:])
		}
	}
	s, err := db.Stats(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Checkpoints, s.SharingRatio > 3)
	// Output:
	// cp9 100 3f1
	// 10 true
}
