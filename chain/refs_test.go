package chain

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// recount computes every key's count from the stored checkpoints, the way
// `sbxdb check` will: distinct keys per checkpoint.
func recount(tx *bolt.Tx) []BlobRef {
	counts := map[string]int64{}
	tx.Bucket(BucketCheckpoints).ForEach(func(k, _ []byte) error {
		cp, _ := GetCheckpoint(tx, string(k))
		for _, key := range cp.BlobKeys() {
			counts[key]++
		}
		return nil
	})
	refs := []BlobRef{}
	for k, n := range counts {
		refs = append(refs, BlobRef{k, n})
	}
	slices.SortFunc(refs, func(a, b BlobRef) int { return cmpStr(a.Key, b.Key) })
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
		keys = append(keys, fileKey(i))
	}
	for i := range 3 {
		keys = append(keys, fmt.Sprintf("%s%064x", ArtifactPrefix, i))
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
	stored := map[string]*Checkpoint{}
	folds := 0
	var history []string
	var cache PendingCache // lives across transactions, as in a sweep
	for step := range 3000 {
		err := db.Update(func(tx *bolt.Tx) error {
			id := fmt.Sprintf("c%d", rng.IntN(40))
			switch cp := stored[id]; {
			case cp != nil && rng.IntN(2) == 0:
				delete(stored, id)
				history = append(history, fmt.Sprintf("del %s %v pendingSeq=%d", id, cp.BlobKeys(), tx.Bucket(BucketPendingRefs).Sequence()))
				if err := DeleteCheckpoints(tx, []string{cp.ID}); err != nil {
					return err
				}
			case cp == nil:
				cp = &Checkpoint{ID: id, ThreadID: "t", Reason: ReasonAutomatic}
				// Up to 90 files: about a third inline (under 2 KiB), the
				// rest in several content chunks sharing keys.
				for j := range rng.IntN(90) {
					cp.Files = append(cp.Files, Entry{Path: fmt.Sprint("f", j), Kind: KindFile, BlobKey: poolKeys[rng.IntN(8)], Size: 1})
				}
				if rng.IntN(3) == 0 {
					cp.Artifacts = []Artifact{{ArtifactID: "a", Name: "n", MimeType: "m", BlobKey: poolKeys[8+rng.IntN(3)]}}
				}
				for range rng.IntN(4) { // shared and repeated message chunks
					cp.Conversation = append(cp.Conversation, json.RawMessage(fmt.Sprint(rng.IntN(3))))
				}
				stored[id] = cp
				history = append(history, fmt.Sprintf("put %s %v pendingSeq=%d", id, cp.BlobKeys(), tx.Bucket(BucketPendingRefs).Sequence()))
				if err := PutCheckpoint(tx, cp); err != nil {
					return err
				}
				if PendingWeight(tx) >= foldAfter {
					folds++
					if err := FoldRefs(tx); err != nil {
						return err
					}
				}
			}
			got, err := References(tx)
			if err != nil {
				return err
			}
			want := recount(tx)
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Errorf("counts differ from the recount (-want +got):\n%s", diff)
			}
			// Chunks: stored exactly when used, counted right.
			uses, err := ChunkUses(tx, true)
			if err != nil {
				return err
			}
			if problems, err := CheckChunks(tx, uses); err != nil || len(problems) > 0 {
				return fmt.Errorf("chunks: %v %v", problems, err)
			}
			wantN := map[string]int64{}
			for _, r := range want {
				wantN[r.Key] = r.References
			}
			cached, err := cache.Counter(tx)
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
				n, err := NewRefCounter(tx).Count(key)
				if err != nil || n != wantN[key] {
					return fmt.Errorf("Count(%s) = %d, %v; recount %d", key, n, err, wantN[key])
				}
				ok, err := NewRefCounter(tx).Referenced(key)
				if err != nil || ok != (wantN[key] > 0) {
					return fmt.Errorf("Referenced(%s) = %v, %v; recount %d", key, ok, err, wantN[key])
				}
			}
			if rng.IntN(50) == 0 {
				if err := FoldRefs(tx); err != nil {
					return err
				}
				after, _ := References(tx)
				if diff := cmp.Diff(got, after); diff != "" {
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

// The pending set weighs 1 per checkpoint plus 1 per 1,024 entries, kept
// by appends and deletes, and WeighPending recomputes it from the records
// (as the upgrade of a format-2 store, whose sequence counted keys, does).
func TestPendingWeight(t *testing.T) {
	db := recordDB(t)
	sizes := map[string]int{"small": 3, "k1": 1023, "k2": 1024, "big": 5000}
	want := uint64(0)
	err := db.Update(func(tx *bolt.Tx) error {
		for id, n := range sizes {
			cp := &Checkpoint{ID: id, ThreadID: "t", Reason: ReasonAutomatic}
			for j := range n {
				cp.Files = append(cp.Files, Entry{Path: fmt.Sprintf("f%05d", j), Kind: KindFile, BlobKey: fileKey(j), Size: 1})
			}
			if err := PutCheckpoint(tx, cp); err != nil {
				return err
			}
		}
		if got := PendingWeight(tx); got != 1+1+2+5 {
			return fmt.Errorf("after the appends: weight %d, want 9", got)
		}
		// 4 checkpoints of one thread, weighing 9.
		for per, want := range map[int]bool{4: true, 5: false, 9: false} {
			if due, err := PendingPerThread(tx, per); due != want || err != nil {
				return fmt.Errorf("PendingPerThread(%d) = %v, %v; want %v", per, due, err, want)
			}
		}
		if err := DeleteCheckpoints(tx, []string{"big"}); err != nil {
			return err
		}
		if want = 1 + 1 + 2; PendingWeight(tx) != want {
			return fmt.Errorf("after deleting big: weight %d, want %d", PendingWeight(tx), want)
		}
		// Format 2 counted keys and named no threads.
		b := tx.Bucket(BucketPendingRefs)
		for _, id := range []string{"small", "k1", "k2"} {
			if err := b.Put([]byte(id), Seal(BucketPendingRefs, []byte(id), nil)); err != nil {
				return err
			}
		}
		if err := b.SetSequence(3); err != nil {
			return err
		}
		if err := PutCheckpoint(tx, &Checkpoint{ID: "other", ThreadID: "t2", Reason: ReasonAutomatic}); err != nil {
			return err
		}
		if err := WeighPending(tx); err != nil {
			return err
		}
		if got := PendingWeight(tx); got != want+1 {
			return fmt.Errorf("WeighPending: %d, want %d", got, want+1)
		}
		// 4 checkpoints, now of 2 threads.
		for per, want := range map[int]bool{2: true, 3: false} {
			if due, err := PendingPerThread(tx, per); due != want || err != nil {
				return fmt.Errorf("after WeighPending, PendingPerThread(%d) = %v, %v; want %v", per, due, err, want)
			}
		}
		if err := FoldRefs(tx); err != nil {
			return err
		}
		if got := PendingWeight(tx); got != 0 {
			return fmt.Errorf("after a fold: weight %d, want 0", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
