package cas

import (
	"context"
	"slices"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// RepackPlan is what a Repack with Options would rewrite, decided from the
// index as it is when planned, after a sweep deleting the planned keys. It
// changes nothing; Repack decides again from the index under its lock when
// it runs, so a plan is a prediction, never an instruction: a pack whose
// blob the sweep kept after all may fall below the threshold and stay.
type RepackPlan struct {
	Options RepackOptions
	// Stats holds Packs, Before, Recompressed and RecompressedBytes as
	// Repack would report them; Blobs and After are only known by doing it.
	Stats sbxdb.RepackStats
	// Freed is the bytes the planned sweep and this repack give back, not
	// counting what recompression saves: the files of the large blobs the
	// sweep deletes, and the dead bytes of the packs rewritten.
	Freed int64
}

// PlanRepack plans a Repack with opts to run after a sweep that deletes the
// keys dying (nil: none): their bytes count as dead in their packs, and a
// dying large blob is neither recompressed nor counted in Before. Keys the
// index does not hold, or holds damaged, are ignored.
func (s *Store) PlanRepack(ctx context.Context, opts RepackOptions, dying []string) (*RepackPlan, error) {
	if err := checkRepackOptions(opts); err != nil {
		return nil, err
	}
	if s.opts.Remote != nil {
		return s.planRemoteRepack(ctx, opts)
	}
	p := &RepackPlan{Options: opts}
	dead := map[uint64]uint64{} // pack → bytes the sweep would leave dead
	large := map[string]bool{}  // dying large blobs
	err := s.db.View(func(tx kv.Tx) error {
		b := tx.Bucket(bucketIndex)
		for i, key := range dying {
			if i%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			v := b.Get([]byte(key))
			if v == nil {
				continue
			}
			e, err := decodeEntry(key, v)
			if err != nil {
				continue // Check reports it; a sweep cannot delete it either
			}
			if e.packed() {
				dead[e.pack] += e.footprint()
			} else {
				large[key] = true
				p.Freed += headerSize + int64(e.stored)
			}
		}
		old, _, err := s.repackPlan(tx, opts, &p.Stats, dead)
		for _, ps := range old {
			p.Freed += int64(ps.dead)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if opts.Recompress {
		larges, _, err := s.coldLarges(ctx, opts.ColdBefore)
		if err != nil {
			return nil, err
		}
		for _, l := range slices.DeleteFunc(larges, func(l largeItem) bool { return large[l.key] }) {
			n := headerSize + int64(l.e.stored)
			p.Stats.Packs++
			p.Stats.Before += n
			p.Stats.Recompressed++
			p.Stats.RecompressedBytes += n
		}
	}
	return p, nil
}

// planRemoteRepack is PlanRepack for a store with Remote: the packs in the
// bucket as the index has them now (remote_repack.go decides the same way
// when it runs). The sweep's dying keys are not counted in: a bucket's pack
// is judged by its dead share before the sweep, so the plan may name fewer
// packs than the run rewrites.
func (s *Store) planRemoteRepack(ctx context.Context, opts RepackOptions) (*RepackPlan, error) {
	var mods map[uint64]time.Time
	if opts.Recompress && !opts.ColdBefore.IsZero() {
		var err error
		if mods, err = s.remotePackTimes(ctx); err != nil {
			return nil, err
		}
	}
	p := &RepackPlan{Options: opts}
	err := s.db.View(func(tx kv.Tx) error {
		p.Stats, p.Freed = sbxdb.RepackStats{}, 0
		old, _, err := remoteRepackPlan(tx, opts, mods, &p.Stats)
		for _, ps := range old {
			p.Freed += int64(ps.dead)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
