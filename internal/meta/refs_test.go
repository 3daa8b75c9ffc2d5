package meta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

// recount computes every key's count from the stored checkpoints, the way
// `sbxdb check` will: distinct keys per checkpoint.
func recount(tx *bolt.Tx) []chain.BlobRef {
	counts := map[string]int64{}
	tx.Bucket(BucketCheckpoints).ForEach(func(k, _ []byte) error {
		cp, _ := GetCheckpoint(kv.Bolt(tx), string(k))
		for _, key := range cp.BlobKeys() {
			counts[key]++
		}
		return nil
	})
	refs := []chain.BlobRef{}
	for k, n := range counts {
		refs = append(refs, chain.BlobRef{Key: k, References: n})
	}
	slices.SortFunc(refs, func(a, b chain.BlobRef) int { return cmpStr(a.Key, b.Key) })
	return refs
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// poolKeys are the blob keys the randomized test draws from.
var poolKeys = func() (keys []string) {
	for i := range 8 {
		keys = append(keys, testkit.FileKey(i))
	}
	for i := range 3 {
		keys = append(keys, fmt.Sprintf("%s%064x", chain.ArtifactPrefix, i))
	}
	return keys
}()

// Random puts and deletes, folding once 3 checkpoints are pending: after
// every step the counts read equal the counts recomputed from the records,
// and an explicit fold changes no count.
func TestLazyRefsMatchRecount(t *testing.T) {
	const foldAfter = 3
	db, err := bolt.Open(filepath.Join(t.TempDir(), "refs.db"), 0o644, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.Update(func(tx *bolt.Tx) error {
		for _, name := range Buckets {
			tx.CreateBucket(name)
		}
		return nil
	})
	rng := rand.New(rand.NewPCG(7, 7))
	stored := map[string]*chain.Checkpoint{}
	folds := 0
	var history []string
	var cache PendingCache // lives across transactions, as in a sweep
	for step := range testkit.Scale(t, 1000, 3000) {
		err := db.Update(func(tx *bolt.Tx) error {
			id := fmt.Sprintf("c%d", rng.IntN(40))
			switch cp := stored[id]; {
			case cp != nil && rng.IntN(2) == 0:
				delete(stored, id)
				history = append(history, fmt.Sprintf("del %s %v pendingSeq=%d", id, cp.BlobKeys(), tx.Bucket(BucketPendingRefs).Sequence()))
				if err := DeleteCheckpoints(kv.Bolt(tx), []string{cp.ID}); err != nil {
					return err
				}
			case cp == nil:
				cp = &chain.Checkpoint{ID: id, ThreadID: "t", Reason: chain.ReasonAutomatic}
				// Up to 90 files: about a third inline (under 2 KiB), the
				// rest in several content chunks sharing keys.
				for j := range rng.IntN(90) {
					cp.Files = append(cp.Files, chain.Entry{Path: fmt.Sprint("f", j), Kind: chain.KindFile, BlobKey: poolKeys[rng.IntN(8)], Size: 1})
				}
				if rng.IntN(3) == 0 {
					cp.Artifacts = []chain.Artifact{{ArtifactID: "a", Name: "n", MimeType: "m", BlobKey: poolKeys[8+rng.IntN(3)]}}
				}
				for range rng.IntN(4) { // shared and repeated message chunks
					cp.Conversation = append(cp.Conversation, json.RawMessage(fmt.Sprint(rng.IntN(3))))
				}
				stored[id] = cp
				history = append(history, fmt.Sprintf("put %s %v pendingSeq=%d", id, cp.BlobKeys(), tx.Bucket(BucketPendingRefs).Sequence()))
				if err := putCheckpoint(kv.Bolt(tx), cp); err != nil {
					return err
				}
				if PendingWeight(kv.Bolt(tx)) >= foldAfter {
					folds++
					if err := FoldRefs(kv.Bolt(tx)); err != nil {
						return err
					}
				}
			}
			if err := checkCounts(tx); err != nil {
				return err
			}
			want := recount(tx)
			wantN := map[string]int64{}
			for _, r := range want {
				wantN[r.Key] = r.References
			}
			cached, err := cache.Counter(kv.Bolt(tx))
			if err != nil {
				return err
			}
			n := 0
			tx.Bucket(BucketRefs).ForEach(func(_, _ []byte) error { n++; return nil })
			if uint64(n) != tx.Bucket(BucketRefs).Sequence() {
				return fmt.Errorf("refs bucket holds %d keys, its sequence says %d", n, tx.Bucket(BucketRefs).Sequence())
			}
			for _, key := range poolKeys {
				if n, err := cached.Count(key); err != nil || n != wantN[key] {
					return fmt.Errorf("cached Count(%s) = %d, %v; recount %d", key, n, err, wantN[key])
				}
				n, err := NewRefCounter(kv.Bolt(tx)).Count(key)
				if err != nil || n != wantN[key] {
					return fmt.Errorf("Count(%s) = %d, %v; recount %d", key, n, err, wantN[key])
				}
				ok, err := NewRefCounter(kv.Bolt(tx)).Referenced(key)
				if err != nil || ok != (wantN[key] > 0) {
					return fmt.Errorf("Referenced(%s) = %v, %v; recount %d", key, ok, err, wantN[key])
				}
			}
			if rng.IntN(50) == 0 {
				if err := FoldRefs(kv.Bolt(tx)); err != nil {
					return err
				}
				after, _ := References(kv.Bolt(tx))
				if diff := cmp.Diff(want, after); diff != "" {
					return fmt.Errorf("an explicit fold changed counts:\n%s", diff)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: %v\n%s", step, err, strings.Join(history, "\n"))
		}
	}
	if folds < 100 {
		t.Errorf("only %d automatic folds: the test did not exercise folding", folds)
	}
}

// The pending set weighs 1 per checkpoint plus 1 per 256 entries, kept by
// appends and deletes; UpgradePending rekeys and weighs the pending set of
// a format-2 store (keyed by id, empty values, the sequence a count).
func TestPendingWeight(t *testing.T) {
	db := recordDB(t)
	sizes := map[string]int{"small": 3, "k1": 255, "k2": 256, "big": 1300}
	want := uint64(0)
	err := db.Update(func(tx *bolt.Tx) error {
		for id, n := range sizes {
			cp := &chain.Checkpoint{ID: id, ThreadID: "t", Reason: chain.ReasonAutomatic}
			for j := range n {
				cp.Files = append(cp.Files, chain.Entry{Path: fmt.Sprintf("f%05d", j), Kind: chain.KindFile, BlobKey: testkit.FileKey(j), Size: 1})
			}
			if err := putCheckpoint(kv.Bolt(tx), cp); err != nil {
				return err
			}
		}
		if got := PendingWeight(kv.Bolt(tx)); got != 1+1+2+6 {
			return fmt.Errorf("after the appends: weight %d, want 10", got)
		}
		// 4 checkpoints of one thread, weighing 10.
		for per, want := range map[int]bool{4: true, 5: false, 11: false} {
			if due, err := PendingPerThread(kv.Bolt(tx), per); due != want || err != nil {
				return fmt.Errorf("PendingPerThread(%d) = %v, %v; want %v", per, due, err, want)
			}
		}
		if err := DeleteCheckpoints(kv.Bolt(tx), []string{"big"}); err != nil {
			return err
		}
		if want = 1 + 1 + 2; PendingWeight(kv.Bolt(tx)) != want {
			return fmt.Errorf("after deleting big: weight %d, want %d", PendingWeight(kv.Bolt(tx)), want)
		}
		// Format 2 keyed the set by id, with empty values, and counted it.
		if err := PutRecord(kv.Bolt(tx), &chain.Checkpoint{ID: "other", ThreadID: "t2", Reason: chain.ReasonAutomatic}); err != nil {
			return err
		}
		if err := tx.DeleteBucket(BucketPendingRefs); err != nil {
			return err
		}
		b, err := tx.CreateBucket(BucketPendingRefs)
		if err != nil {
			return err
		}
		for _, id := range []string{"small", "k1", "k2", "other"} {
			if err := b.Put([]byte(id), Seal(BucketPendingRefs, []byte(id), nil)); err != nil {
				return err
			}
		}
		if err := b.SetSequence(4); err != nil {
			return err
		}
		if err := UpgradePending(kv.Bolt(tx)); err != nil {
			return err
		}
		if got := PendingWeight(kv.Bolt(tx)); got != want+1 {
			return fmt.Errorf("UpgradePending: weight %d, want %d", got, want+1)
		}
		if b.Get([]byte("k1")) != nil || b.Get(PendingKey(0, "k1")) == nil {
			return fmt.Errorf("UpgradePending left the key of k1 as it was")
		}
		// 4 checkpoints, now of 2 threads.
		for per, want := range map[int]bool{2: true, 3: false} {
			if due, err := PendingPerThread(kv.Bolt(tx), per); due != want || err != nil {
				return fmt.Errorf("after UpgradePending, PendingPerThread(%d) = %v, %v; want %v", per, due, err, want)
			}
		}
		if err := FoldRefs(kv.Bolt(tx)); err != nil {
			return err
		}
		if got := PendingWeight(kv.Bolt(tx)); got != 0 {
			return fmt.Errorf("after a fold: weight %d, want 0", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The count model with what TestLazyRefsMatchRecount lacks: several
// threads, directories and symlinks, deletes of several checkpoints at
// once, folds by weight, and manifests past 1,024 entries (weight above 1).
// After every step: each checkpoint reads back, counts equal a recount,
// chunks check clean, and the pending set's weight and thread names agree
// with the checkpoints. (Written by a review of format 3.)
func TestRefsModelThreadsAndWeights(t *testing.T) {
	seeds, steps := testkit.ScaleShort(t, uint64(1), 2, 3), testkit.ScaleShort(t, 300, 400, 800)
	for seed := range seeds {
		db := recordDB(t)
		rng := rand.New(rand.NewPCG(seed, 99))
		stored := map[string]*chain.Checkpoint{}
		for step := range steps {
			err := db.Update(func(tx *bolt.Tx) error {
				if op := rng.IntN(10); op < 3 && len(stored) > 0 {
					if err := deleteSome(tx, rng, stored, 3); err != nil {
						return err
					}
				} else {
					id := fmt.Sprintf("s%dc%d", seed, step)
					cp := &chain.Checkpoint{ID: id, ThreadID: fmt.Sprint("t", rng.IntN(3)), Reason: chain.ReasonAutomatic}
					n := rng.IntN(80)
					if rng.IntN(60) == 0 {
						n = 1030 + rng.IntN(1100)
					}
					for j := range n {
						e := chain.Entry{Path: fmt.Sprintf("f%05d", j), Kind: chain.KindFile, BlobKey: poolKeys[rng.IntN(8)], Size: int64(rng.IntN(3))}
						switch rng.IntN(6) {
						case 0:
							e = chain.Entry{Path: e.Path, Kind: chain.KindDir}
						case 1:
							e = chain.Entry{Path: e.Path, Kind: chain.KindSymlink, Target: fmt.Sprint("tgt", rng.IntN(2))}
						}
						cp.Files = append(cp.Files, e)
					}
					if rng.IntN(3) == 0 {
						cp.Artifacts = []chain.Artifact{{ArtifactID: "a", Name: "n", MimeType: "m", BlobKey: poolKeys[8+rng.IntN(3)]}}
					}
					for range rng.IntN(4) {
						cp.Conversation = append(cp.Conversation, json.RawMessage(fmt.Sprint(rng.IntN(3))))
					}
					stored[id] = cp
					if err := putCheckpoint(kv.Bolt(tx), cp); err != nil {
						return err
					}
					if PendingWeight(kv.Bolt(tx)) >= 7 || rng.IntN(20) == 0 {
						if err := FoldRefs(kv.Bolt(tx)); err != nil {
							return err
						}
					}
				}
				for id, cp := range stored {
					got, err := GetCheckpoint(kv.Bolt(tx), id)
					if err != nil {
						return err
					}
					if diff := cmp.Diff(cp.Files, got.Files); len(cp.Files) > 0 && diff != "" {
						return fmt.Errorf("%s files differ: %s", id, diff)
					}
				}
				if err := checkCounts(tx); err != nil {
					return err
				}
				w := uint64(0)
				err := tx.Bucket(BucketPendingRefs).ForEach(func(k, v []byte) error {
					th, err := Unseal(BucketPendingRefs, k, v)
					if err != nil {
						return err
					}
					cp := stored[string(k[8:])]
					if cp == nil || string(th) != cp.ThreadID || !bytes.Equal(k, PendingKey(cp.CreatedAt, cp.ID)) {
						return fmt.Errorf("pending %s names thread %q", k, th)
					}
					w += CheckpointWeight(uint64(len(cp.Files)))
					return nil
				})
				if err != nil {
					return err
				}
				if w != PendingWeight(kv.Bolt(tx)) {
					return fmt.Errorf("weight %d, want %d", PendingWeight(kv.Bolt(tx)), w)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
	}
}

// checkCounts checks the invariants of counts in tx: the references equal
// a recount from the records, and the chunks are stored exactly when used
// and counted right.
func checkCounts(tx *bolt.Tx) error {
	got, err := References(kv.Bolt(tx))
	if err != nil {
		return err
	}
	if diff := cmp.Diff(recount(tx), got); diff != "" {
		return fmt.Errorf("counts differ from the recount (-want +got):\n%s", diff)
	}
	uses, err := ChunkUses(kv.Bolt(tx), true)
	if err != nil {
		return err
	}
	if problems, err := CheckChunks(kv.Bolt(tx), uses); err != nil || len(problems) > 0 {
		return fmt.Errorf("chunks: %v %v", problems, err)
	}
	return nil
}

// deleteSome deletes about one in n of the stored checkpoints, at once.
func deleteSome(tx *bolt.Tx, rng *rand.Rand, stored map[string]*chain.Checkpoint, n int) error {
	var ids []string
	for id := range stored {
		if rng.IntN(n) == 0 {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		delete(stored, id)
	}
	return DeleteCheckpoints(kv.Bolt(tx), ids)
}
