package engine

import (
	"context"

	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/lease"
)

// Writers returns the stored writer state of every thread that was ever
// leased, by thread id, for inspection. A state may hold a lease that has
// expired: compare with State.Live at the current time. Owner tokens
// authorise writes, so they are left out (OwnerToken is "").
func (db *DB) Writers(ctx context.Context) (map[string]lease.State, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := map[string]lease.State{}
	err := db.viewCtx(ctx, func(tx kv.Tx) error {
		return meta.ForEachLease(tx, func(threadID string, s lease.State) error {
			s.OwnerToken = ""
			out[threadID] = s
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
