package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
)

// References lists the blob keys checkpoints use (the marks).
type References interface {
	// BlobReferences returns every referenced key with its count. Sweep
	// expects UTF-8 byte order (what the stores return) but sorts a copy
	// when it is not.
	BlobReferences(ctx context.Context) ([]chain.BlobRef, error)
}

// Blobs is the object store being swept.
type Blobs interface {
	// List returns every key starting with prefix and its upload time. Sweep
	// expects UTF-8 byte order (what cas.Store returns) but sorts a copy when
	// it is not.
	List(ctx context.Context, prefix string) ([]cas.Info, error)
	// Delete removes key.
	Delete(ctx context.Context, key string) error
}

// KeysDeleter is an optional interface of Blobs: it deletes many keys at once
// and may decline some (a key a capture has pinned, or one referenced since
// the marks were read); it returns the keys it did delete, sorted. Sweep calls
// DeleteKeys instead of Delete when Blobs has it, in groups of at most
// DeleteGroup keys. DeleteKeys must not keep or modify keys after it returns.
type KeysDeleter interface {
	DeleteKeys(ctx context.Context, keys []string) (deleted []string, err error)
}

// DeleteGroup is the most keys Sweep passes to one DeleteKeys call: large
// enough to amortize a transaction, small enough that a sweep of millions of
// keys never holds the store's lock for long.
const DeleteGroup = 1024

// The roots Sweep lists, in the order it lists them (SPEC §5.2). Key formats
// below them are not checked: a junk key under sandbox-files/ is a blob key
// too. Every key under artifactsRoot sorts before every key under filesRoot
// (they differ at byte 8, 'a' < 'f', and neither is a prefix of the other),
// which the mark phase relies on to produce keys in byte order.
const (
	filesRoot     = chain.FileRoot
	artifactsRoot = chain.ArtifactRoot
)

// ErrInvalidOptions is wrapped by the error Sweep returns for a SweepInput it
// rejects before doing anything.
var ErrInvalidOptions = errors.New("gc: invalid sweep options")

// SweepInput is the argument of Sweep.
type SweepInput struct {
	// References supplies the marks.
	References References
	// Blobs is the store swept.
	Blobs Blobs
	// OlderThan: a key goes only if now − uploaded > OlderThan (strictly).
	// Must be > 0 unless Immediate is set: a forgotten window would delete
	// blobs a capture just uploaded, so a zero OlderThan without Immediate is
	// an error (W4 "missing").
	OlderThan time.Duration
	// Immediate allows OlderThan == 0 (sweep every unreferenced key uploaded
	// before now). Tests and stores whose captures pin their keys (the engine)
	// may use it.
	Immediate bool
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// markCheckEvery is how many keys the mark phase examines between checks of
// ctx: often enough to stop a million-key sweep promptly, rarely enough to
// cost nothing.
const markCheckEvery = 1 << 14

// SweepPlan is what a sweep would delete, decided from one listing and one
// reading of the references: the keys under sandbox-files/ and
// sandbox-artifacts/ that no reference names and that were uploaded more
// than OlderThan before the plan's clock reading. It is a value: print it,
// test it, then carry it out with ExecuteSweep (or drop it).
type SweepPlan struct {
	Examined   int // distinct keys listed under the two prefixes
	Referenced int // of those, how many had a reference
	// Keys are the keys to delete, in UTF-8 byte order, never nil, and
	// Stored their stored sizes (Info.Stored), index for index.
	Keys   []string
	Stored []int64
}

// Bytes is Stored summed: what deleting every key of the plan gives back.
func (p *SweepPlan) Bytes() int64 {
	var n int64
	for _, s := range p.Stored {
		n += s
	}
	return n
}

// Result is the plan as the SweepResult a sweep deleting all of it reports:
// what a dry run prints. Deleted is Keys itself, read only.
func (p *SweepPlan) Result() sbxdb.SweepResult {
	return sbxdb.SweepResult{Examined: p.Examined, Referenced: p.Referenced, Deleted: p.Keys, Bytes: p.Bytes()}
}

// PlanSweep decides what Sweep would delete now and deletes nothing (SPEC
// §5.2, §10 Q16): the blobs under sandbox-files/ and sandbox-artifacts/
// that no checkpoint uses and that were uploaded more than OlderThan ago.
// Keys outside those prefixes are never planned.
//
// It lists the blobs first and reads the references after, so a checkpoint
// committed while the listing ran is seen as a reference. A key listed with
// no upload time is kept (fail closed). On an error of the mark phase
// (ctx), the plan holds the counts so far and no key.
func PlanSweep(ctx context.Context, in SweepInput) (*SweepPlan, error) {
	switch {
	case in.References == nil:
		return nil, fmt.Errorf("%w: References is nil", ErrInvalidOptions)
	case in.Blobs == nil:
		return nil, fmt.Errorf("%w: Blobs is nil", ErrInvalidOptions)
	case in.OlderThan < 0:
		return nil, fmt.Errorf("%w: OlderThan %v is negative", ErrInvalidOptions, in.OlderThan)
	case in.OlderThan == 0 && !in.Immediate:
		return nil, fmt.Errorf("%w: OlderThan is 0 and Immediate is not set", ErrInvalidOptions)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// One clock reading, taken before listing: a key uploaded while the sweep
	// runs then has Uploaded >= now and is never old enough.
	now := time.Now()
	if in.Now != nil {
		now = in.Now()
	}

	files, err := listRoot(ctx, in.Blobs, filesRoot)
	if err != nil {
		return nil, err
	}
	artifacts, err := listRoot(ctx, in.Blobs, artifactsRoot)
	if err != nil {
		return nil, err
	}
	refs, err := in.References.BlobReferences(ctx)
	if err != nil {
		return nil, fmt.Errorf("gc: read blob references: %w", err)
	}
	refs = sortedRefs(refs)

	p := &SweepPlan{}
	keys, stored, err := mark(ctx, p, [2][]cas.Info{artifacts, files}, refs, now, in.OlderThan)
	if err != nil {
		p.Keys = []string{}
		return p, err
	}
	p.Keys, p.Stored = keys, stored
	return p, nil
}

// Sweep plans (PlanSweep) and carries the plan out at once, without a
// re-check between the two over a Blobs that has no KeysDeleter: it is
// PlanSweep followed by the deletes of ExecuteSweep. Keys are deleted in
// byte order; the first delete error stops the sweep and is returned with
// the result so far, whose Deleted holds the keys deleted before it
// (deleting them was safe: they were unreferenced).
//
// Sweep never modifies the checkpoint store and takes no writer lease. Over a
// plain object store it races with a capture that re-uses an old unreferenced
// blob (SPEC §5.2): run it when no capture runs, or over a Blobs whose
// DeleteKeys re-checks pins and references, as the engine's does.
func Sweep(ctx context.Context, in SweepInput) (sbxdb.SweepResult, error) {
	p, err := PlanSweep(ctx, in)
	if err != nil {
		if p == nil {
			return sbxdb.SweepResult{}, err
		}
		return sbxdb.SweepResult{Examined: p.Examined, Referenced: p.Referenced}, err
	}
	return execute(ctx, in.Blobs, p)
}

// ExecuteSweep deletes the keys of p, a plan PlanSweep made, possibly a
// while ago, and returns what it deleted (a subset of p.Keys, in byte order;
// Examined and Referenced are the plan's). It never deletes a key p does
// not name.
//
// A stale plan is safe to execute as far as the Blobs allows: with a
// KeysDeleter, that deleter's re-check decides each key at the moment of
// deletion (the engine's keeps a key referenced, held, pinned or uploaded
// since the plan's window). Without one, ExecuteSweep reads
// in.References again first and keeps every key referenced now; a key
// re-uploaded since the plan, not yet referenced, is not seen there, so over
// a plain object store execute a plan only while no capture runs.
func ExecuteSweep(ctx context.Context, in SweepInput, p *SweepPlan) (sbxdb.SweepResult, error) {
	switch {
	case p == nil:
		return sbxdb.SweepResult{}, fmt.Errorf("%w: no plan", ErrInvalidOptions)
	case in.Blobs == nil:
		return sbxdb.SweepResult{}, fmt.Errorf("%w: Blobs is nil", ErrInvalidOptions)
	case len(p.Keys) != len(p.Stored):
		return sbxdb.SweepResult{}, fmt.Errorf("%w: plan has %d keys and %d sizes", ErrInvalidOptions, len(p.Keys), len(p.Stored))
	}
	if _, ok := in.Blobs.(KeysDeleter); !ok && in.References != nil {
		refs, err := in.References.BlobReferences(ctx)
		if err != nil {
			return sbxdb.SweepResult{Examined: p.Examined, Referenced: p.Referenced, Deleted: []string{}},
				fmt.Errorf("gc: read blob references: %w", err)
		}
		p = unreferenced(p, sortedRefs(refs))
	}
	return execute(ctx, in.Blobs, p)
}

// unreferenced returns p without the keys refs (sorted) references, as a
// new plan when any is dropped.
func unreferenced(p *SweepPlan, refs []chain.BlobRef) *SweepPlan {
	out := &SweepPlan{Examined: p.Examined, Referenced: p.Referenced, Keys: []string{}}
	j := 0
	for i, key := range p.Keys {
		for j < len(refs) && refs[j].Key < key {
			j++
		}
		referenced := false
		for k := j; k < len(refs) && refs[k].Key == key; k++ {
			referenced = referenced || refs[k].References > 0
		}
		if !referenced {
			out.Keys = append(out.Keys, key)
			out.Stored = append(out.Stored, p.Stored[i])
		}
	}
	return out
}

// execute deletes p's keys: in groups with DeleteKeys when b has it, else
// one by one.
func execute(ctx context.Context, b Blobs, p *SweepPlan) (sbxdb.SweepResult, error) {
	res := sbxdb.SweepResult{Examined: p.Examined, Referenced: p.Referenced}
	if kd, ok := b.(KeysDeleter); ok {
		return deleteGroups(ctx, res, kd, p.Keys, p.Stored)
	}
	return deleteEach(ctx, res, b, p.Keys, p.Stored)
}

// listRoot lists root and returns its keys sorted, without keys outside root.
// The common case (every key under root, already in order) returns the
// lister's slice itself, read only; otherwise it returns a sorted copy of the
// keys under root, since the slice may be the lister's own state.
func listRoot(ctx context.Context, b Blobs, root string) ([]cas.Info, error) {
	infos, err := b.List(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("gc: list %s: %w", root, err)
	}
	clean := true
	for i := range infos {
		if !strings.HasPrefix(infos[i].Key, root) || (i > 0 && infos[i].Key < infos[i-1].Key) {
			clean = false
			break
		}
	}
	if clean {
		return infos, nil
	}
	out := make([]cas.Info, 0, len(infos))
	for i := range infos {
		if strings.HasPrefix(infos[i].Key, root) {
			out = append(out, infos[i])
		}
	}
	slices.SortStableFunc(out, func(a, b cas.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// sortedRefs returns refs if it is in key order, else a sorted copy.
func sortedRefs(refs []chain.BlobRef) []chain.BlobRef {
	for i := 1; i < len(refs); i++ {
		if refs[i].Key < refs[i-1].Key {
			out := slices.Clone(refs)
			slices.SortStableFunc(out, func(a, b chain.BlobRef) int { return strings.Compare(a.Key, b.Key) })
			return out
		}
	}
	return refs
}

// mark merges the sorted listings (in byte order of their roots) with the
// sorted references and returns the eligible keys in byte order with their
// stored sizes. A merge instead of a set of referenced keys: no map of a
// million strings, no per-key allocation.
func mark(ctx context.Context, res *SweepPlan, lists [2][]cas.Info, refs []chain.BlobRef, now time.Time, olderThan time.Duration) (keys []string, stored []int64, err error) {
	keys = []string{} // never nil: Deleted is a list, possibly empty
	j := 0            // cursor into refs
	for _, list := range lists {
		for i := 0; i < len(list); {
			if res.Examined%markCheckEvery == 0 {
				if err := ctx.Err(); err != nil {
					return nil, nil, err
				}
			}
			key, uploaded, size := list[i].Key, list[i].Uploaded, list[i].Stored
			noTime := uploaded.IsZero()
			// A key listed twice is one key. Fail closed: it is as new as its
			// newest listing, and timeless if any listing has no time.
			for i++; i < len(list) && list[i].Key == key; i++ {
				if u := list[i].Uploaded; u.IsZero() {
					noTime = true
				} else if u.After(uploaded) {
					uploaded = u
				}
				size = max(size, list[i].Stored)
			}
			res.Examined++

			for j < len(refs) && refs[j].Key < key {
				j++
			}
			referenced := false
			for ; j < len(refs) && refs[j].Key == key; j++ {
				referenced = referenced || refs[j].References > 0
			}
			if referenced {
				res.Referenced++
				continue
			}
			if noTime || now.Sub(uploaded) <= olderThan {
				continue
			}
			keys = append(keys, key)
			stored = append(stored, size)
		}
	}
	return keys, stored, nil
}

// deleteEach deletes keys one by one with Blobs.Delete.
func deleteEach(ctx context.Context, res sbxdb.SweepResult, b Blobs, keys []string, stored []int64) (sbxdb.SweepResult, error) {
	for i, key := range keys {
		// keys[:i:i]: a caller appending to Deleted must not overwrite the
		// keys that were not deleted.
		if err := ctx.Err(); err != nil {
			res.Deleted = keys[:i:i]
			return res, err
		}
		if err := b.Delete(ctx, key); err != nil {
			res.Deleted = keys[:i:i]
			return res, fmt.Errorf("gc: delete %s: %w", key, err)
		}
		res.Bytes += stored[i]
	}
	res.Deleted = keys
	return res, nil
}

// deleteGroups deletes keys in groups of DeleteGroup with DeleteKeys and
// reports what the deleter says it deleted, limited to the keys it was asked
// to delete.
func deleteGroups(ctx context.Context, res sbxdb.SweepResult, kd KeysDeleter, keys []string, stored []int64) (sbxdb.SweepResult, error) {
	res.Deleted = make([]string, 0, len(keys))
	for start := 0; start < len(keys); start += DeleteGroup {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		end := min(start+DeleteGroup, len(keys))
		group := keys[start:end:end] // capped: the deleter cannot append into the next group
		got, err := kd.DeleteKeys(ctx, group)
		// What was deleted is reported even with an error: it is gone.
		collect(&res, group, stored[start:end], got)
		if err != nil {
			return res, fmt.Errorf("gc: delete %d keys from %s: %w", len(group), group[0], err)
		}
	}
	return res, nil
}

// collect appends to res.Deleted the keys of group that got names, in group
// order, and adds their stored sizes to Bytes. got should be sorted; it is
// sorted as a copy when not. Keys of got outside group, and repeats, are
// ignored: Deleted reports what this sweep deleted.
func collect(res *sbxdb.SweepResult, group []string, stored []int64, got []string) {
	if !slices.IsSorted(got) {
		got = slices.Clone(got)
		slices.Sort(got)
	}
	g := 0
	for _, key := range got {
		for g < len(group) && group[g] < key {
			g++
		}
		if g == len(group) {
			return
		}
		if group[g] == key {
			res.Deleted = append(res.Deleted, key)
			res.Bytes += stored[g]
			g++
		}
	}
}
