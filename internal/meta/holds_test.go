package meta

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

func openTestDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "holds.db"), 0o644, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range Buckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// Random puts, overwrites and deletes of objects and artifact records:
// after every step the stored holds equal the recount, and the artifact
// indexes match the records.
func TestHoldsMatchRecount(t *testing.T) {
	db := openTestDB(t)
	rng := rand.New(rand.NewPCG(3, 9))
	key := func() string { return testkit.FileKey(rng.IntN(6)) }
	for step := range testkit.Scale(t, 500, 3000) {
		err := db.Update(func(tx *bolt.Tx) error {
			id := fmt.Sprint("k", rng.IntN(12))
			switch rng.IntN(4) {
			case 0:
				return PutObject(kv.Bolt(tx), id, &Object{BlobKey: key(), Size: int64(step), Metadata: map[string]string{"s": fmt.Sprint(step)}})
			case 1:
				_, err := DeleteObject(kv.Bolt(tx), id)
				return err
			case 2:
				r := &ArtifactRecord{ArtifactID: id, RunID: fmt.Sprint("r", rng.IntN(3)), ThreadID: fmt.Sprint("t", rng.IntN(3)),
					Name: "n", MimeType: "m", CreatedAt: int64(rng.IntN(5) - 2)}
				if rng.IntN(3) > 0 {
					r.BlobKey = key()
				}
				return PutArtifactRecord(kv.Bolt(tx), r)
			default:
				_, err := DeleteArtifactRecord(kv.Bolt(tx), id)
				return err
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		err = db.View(func(tx *bolt.Tx) error {
			objects, records, damaged, err := CountHolds(kv.Bolt(tx), true)
			if err != nil || len(damaged) > 0 {
				return fmt.Errorf("recount: %v %v", damaged, err)
			}
			want := maps.Clone(objects)
			for k, n := range records {
				want[k] += n
			}
			stored, err := Holds(kv.Bolt(tx))
			if err != nil {
				return err
			}
			got := map[string]int64{}
			for _, h := range stored {
				got[h.Key] = h.References
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("holds %v, recount %v", got, want)
			}
			if p, err := CheckArtifactIndexes(kv.Bolt(tx)); len(p) > 0 || err != nil {
				return fmt.Errorf("artifact indexes: %v, %v", p, err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
}

// Every truncation of an object or artifact record is a damaged record,
// never a panic or a record read wrong.
func TestObjectRecordsDamaged(t *testing.T) {
	o := &Object{BlobKey: testkit.FileKey(1), Size: 9, ContentType: "text/plain", Metadata: map[string]string{"a": "1", "b": "2"}, Uploaded: 77}
	p := encodeObject(o)
	back, err := decodeObject([]byte("k"), p)
	if err != nil || fmt.Sprint(*back) != fmt.Sprint(*o) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	for n := range len(p) {
		if _, err := decodeObject([]byte("k"), p[:n]); !errors.Is(err, chain.ErrCorrupt) {
			t.Errorf("object record cut to %d bytes: %v", n, err)
		}
	}
	r := &ArtifactRecord{ArtifactID: "a", RunID: "r", ThreadID: "t", BlobKey: testkit.FileKey(2), Name: "n", MimeType: "m", SourceURL: "u", Size: 3, CreatedAt: -4}
	p = encodeArtifactRecord(r)
	if back, err := decodeArtifactRecord([]byte("a"), p); err != nil || *back != *r {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if _, err := decodeArtifactRecord([]byte("other"), p); !errors.Is(err, chain.ErrCorrupt) {
		t.Errorf("a record under another id: %v", err)
	}
	for n := range len(p) {
		if _, err := decodeArtifactRecord([]byte("a"), p[:n]); !errors.Is(err, chain.ErrCorrupt) {
			t.Errorf("artifact record cut to %d bytes: %v", n, err)
		}
	}
}
