package memstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/memstore"
)

// A writer takes the thread's lease, appends a root checkpoint and a child,
// reads the head, and releases the lease.
func Example() {
	ctx := context.Background()
	clock := func() time.Time { return time.UnixMilli(1000) } // a frozen clock
	store, err := memstore.New(sbxdb.Options{Now: clock})
	if err != nil {
		panic(err)
	}

	l, err := store.AcquireWriter(ctx, "thread-1")
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	fmt.Println("fence", l.Fence, "expires", l.ExpiresAt().UnixMilli())

	key := chain.FilePrefix + strings.Repeat("ab", 32)
	for i, id := range []string{"cp-1", "cp-2"} {
		parent, _ := store.Head(ctx, "thread-1") // "" (null) for the root
		head, err := store.Append(ctx, chain.AppendInput{
			Checkpoint: &chain.Checkpoint{
				ID: id, ThreadID: "thread-1", ParentID: parent,
				CreatedAt: int64(1000 + i), Reason: chain.ReasonAutomatic,
				Files:        []chain.Entry{{Path: "main.go", Kind: chain.KindFile, BlobKey: key, Size: 42}},
				Conversation: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
			},
			ExpectedHeadID: parent,
			Writer:         l.Writer,
		})
		if err != nil {
			panic(err)
		}
		fmt.Println("appended, head", head)
	}

	head, _ := store.Head(ctx, "thread-1")
	refs, _ := store.BlobReferences(ctx)
	fmt.Println("head", head, "references", refs[0].References)

	// A second writer must wait for the release or the expiry.
	_, err = store.AcquireWriter(ctx, "thread-1")
	fmt.Println(chain.Code(err))
	// Output:
	// fence 1 expires 121000
	// appended, head cp-1
	// appended, head cp-2
	// head cp-2 references 2
	// SANDBOX_SNAPSHOT_WRITER_CONFLICT
}
