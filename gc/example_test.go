package gc_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/gc"
)

// bucket is a tiny in-memory object store: key → upload time.
type bucket map[string]time.Time

func (b bucket) List(_ context.Context, prefix string) ([]cas.Info, error) {
	var out []cas.Info
	for k, t := range b {
		if strings.HasPrefix(k, prefix) {
			out = append(out, cas.Info{Key: k, Stored: 100, Uploaded: t})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (b bucket) Delete(_ context.Context, key string) error {
	delete(b, key)
	return nil
}

// refs is a fixed reference table.
type refs []chain.BlobRef

func (r refs) BlobReferences(context.Context) ([]chain.BlobRef, error) { return r, nil }

// A nightly sweep deletes the blobs no checkpoint uses that are older than a
// day; new uploads, referenced blobs and other keys in the bucket stay.
func Example() {
	now := time.Date(2025, 6, 1, 3, 0, 0, 0, time.UTC)
	b := bucket{
		"sandbox-files/sha256/aaaa":     now.Add(-72 * time.Hour), // used by a checkpoint
		"sandbox-files/sha256/bbbb":     now.Add(-72 * time.Hour), // unused and old: deleted
		"sandbox-files/sha256/cccc":     now.Add(-time.Hour),      // unused but new: a capture may be about to use it
		"sandbox-artifacts/sha256/dddd": now.Add(-48 * time.Hour), // unused and old: deleted
		"backups/db.tar":                now.Add(-720 * time.Hour),
	}
	res, err := gc.Sweep(context.Background(), gc.SweepInput{
		References: refs{{Key: "sandbox-files/sha256/aaaa", References: 2}},
		Blobs:      b,
		OlderThan:  24 * time.Hour,
		Now:        func() time.Time { return now },
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("examined %d, referenced %d, freed %d bytes\n", res.Examined, res.Referenced, res.Bytes)
	for _, k := range res.Deleted {
		fmt.Println("deleted", k)
	}
	fmt.Println(len(b), "keys left")
	// Output:
	// examined 4, referenced 1, freed 200 bytes
	// deleted sandbox-artifacts/sha256/dddd
	// deleted sandbox-files/sha256/bbbb
	// 3 keys left
}
