package meta

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

// A chunk whose id (the hash of its bytes) is held by different bytes goes
// under the next id, and whatever names it (the record, or a group's index
// chunk) names that one: a collision never returns another chunk's data.
// Collisions are forged by storing other bytes under the ids first.
func TestChunkCollision(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "c.db"), 0o644, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", Reason: chain.ReasonAutomatic,
		Conversation: []json.RawMessage{json.RawMessage(`"hello"`), json.RawMessage(`"world"`)}}
	for i := range 300 {
		cp.Files = append(cp.Files, chain.Entry{Path: fmt.Sprintf("d%02d/f%03d", i/20, i), Kind: chain.KindFile, BlobKey: testkit.FileKey(i % 9), Size: int64(i)})
	}
	p := Prepare(cp)
	// One chunk of each kind: a content chunk, an index chunk, a shape
	// chunk and a message.
	forged := map[string]uint64{}
	for _, c := range p.chunks {
		kind := "message"
		switch {
		case c.index:
			kind = "index"
		case c.in >= 0:
			kind = "content"
		case len(c.data) > 0 && (c.data[0] == 'f' || c.data[0] == 'd'):
			kind = "shape"
		}
		if _, ok := forged[kind]; !ok {
			forged[kind] = c.hash
		}
	}
	if len(forged) != 4 {
		t.Fatalf("chunk kinds found: %v", forged)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range Buckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		for kind, h := range forged {
			k := binary.BigEndian.AppendUint64(nil, h)
			if err := tx.Bucket(BucketChunks).Put(k, Seal(BucketChunks, k, []byte("not the "+kind))); err != nil {
				return err
			}
		}
		if err := putCheckpoint(kv.Bolt(tx), cp); err != nil {
			return err
		}
		second := cp.Clone()
		second.ID = "c2"
		return putCheckpoint(kv.Bolt(tx), second)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		for _, id := range []string{"c1", "c2"} {
			got, err := GetCheckpoint(kv.Bolt(tx), id)
			if err != nil {
				return err
			}
			want := cp.Clone()
			want.ID = id
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Errorf("%s read back wrong:\n%s", id, diff)
			}
		}
		uses, err := ChunkUses(kv.Bolt(tx), true)
		if err != nil {
			return err
		}
		problems, err := CheckChunks(kv.Bolt(tx), uses)
		if err != nil {
			return err
		}
		// The forged chunks are used by nothing; everything else adds up.
		if len(problems) != len(forged) {
			return fmt.Errorf("check: %v", problems)
		}
		for _, pr := range problems {
			if pr.Detail != "stored, but no checkpoint uses it" {
				return fmt.Errorf("check: %v", problems)
			}
		}
		// The second checkpoint shares every chunk of the first, moved
		// ones included: each chunk is stored once.
		if n := tx.Bucket(BucketChunks).Stats().KeyN; n != len(uses)+len(forged) {
			return fmt.Errorf("%d chunks stored, %d used + %d forged", n, len(uses), len(forged))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
