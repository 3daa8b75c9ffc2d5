package meta

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	bolt "go.etcd.io/bbolt"
)

// ThreadSummary agrees with ListThread, through random puts and deletes over
// threads whose ids are prefixes of each other, with repeated, negative and
// extreme createdAt values.
func TestThreadSummaryMatchesList(t *testing.T) {
	db := openTestDB(t)
	rng := rand.New(rand.NewPCG(5, 11))
	threads := []string{"t", "t2", "tt", "u"}
	times := []int64{-chain.MaxSafeInteger, -1, 0, 0, 7, 7, 7, chain.MaxSafeInteger}
	stored := map[string]bool{}
	check := func(step int) {
		t.Helper()
		err := db.View(func(tx *bolt.Tx) error {
			for _, th := range append(threads, "unknown", "") {
				list, err := ListThread(kv.Bolt(tx), th)
				if err != nil {
					return err
				}
				n, latest, ok, err := ThreadSummary(kv.Bolt(tx), th)
				if err != nil {
					return err
				}
				if n != len(list) || ok != (len(list) > 0) || ok && latest != list[len(list)-1].CreatedAt || !ok && latest != 0 {
					t.Fatalf("step %d, thread %q: summary (%d, %d, %v), List has %d ending %v", step, th, n, latest, ok, len(list), list)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	check(-1)
	for step := range 300 {
		id := fmt.Sprint("c", rng.IntN(40))
		err := db.Update(func(tx *bolt.Tx) error {
			if stored[id] {
				stored[id] = false
				return DeleteCheckpoints(kv.Bolt(tx), []string{id})
			}
			stored[id] = true
			cp := &chain.Checkpoint{ID: id, ThreadID: threads[rng.IntN(len(threads))], CreatedAt: times[rng.IntN(len(times))],
				Reason: chain.ReasonAutomatic}
			return PutPrepared(kv.Bolt(tx), Prepare(cp))
		})
		if err != nil {
			t.Fatal(err)
		}
		check(step)
	}
}

// A damaged thread-index key is ErrCorrupt, never a panic or a wrong count:
// a key too short to hold createdAt and an id, a value whose seal does not
// match its key, a value too short to be sealed.
func TestThreadSummaryDamagedIndex(t *testing.T) {
	for _, c := range []struct {
		name       string
		key, value []byte
	}{
		{"the prefix alone", []byte("t\x00"), nil},
		{"no id", []byte("t\x00\x80\x00\x00\x00\x00\x00\x00\x07"), nil},
		{"half a createdAt", []byte("t\x00\x80\x00\x00"), nil},
		{"a seal of another key", indexKey("t", 7, "c2"), Seal(BucketThreadIndex, indexKey("t", 8, "c2"), nil)},
		{"an empty value", indexKey("t", 7, "c2"), []byte{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := openTestDB(t)
			err := db.Update(func(tx *bolt.Tx) error {
				if err := PutPrepared(kv.Bolt(tx), Prepare(&chain.Checkpoint{ID: "c1", ThreadID: "t", CreatedAt: 1, Reason: chain.ReasonAutomatic})); err != nil {
					return err
				}
				v := c.value
				if v == nil {
					v = Seal(BucketThreadIndex, c.key, nil)
				}
				return tx.Bucket(BucketThreadIndex).Put(c.key, v)
			})
			if err != nil {
				t.Fatal(err)
			}
			db.View(func(tx *bolt.Tx) error {
				n, latest, ok, err := ThreadSummary(kv.Bolt(tx), "t")
				if !errors.Is(err, chain.ErrCorrupt) || n != 0 || latest != 0 || ok {
					t.Errorf("ThreadSummary = (%d, %d, %v, %v), want ErrCorrupt", n, latest, ok, err)
				}
				if _, _, _, err := ThreadSummary(kv.Bolt(tx), "u"); err != nil {
					t.Errorf("another thread: %v", err)
				}
				return nil
			})
		})
	}
}
