package client

import (
	"context"

	"github.com/sbxdb/sbxdb"
)

// Instances returns the server's instance store (SPEC §4) over
// /v1/instances/*. Like the embedded one it validates nothing: any key,
// the empty one and ones that are not UTF-8 included, and every field
// travels unchanged (text, wire.go).
func (c *Client) Instances() sbxdb.InstanceStore { return instanceStore{c} }

type instanceStore struct{ c *Client }

type keyArg struct {
	Key text `json:"key"`
}

// Get returns the record of key, or nil and no error when there is none.
func (s instanceStore) Get(ctx context.Context, key string) (*sbxdb.InstanceRecord, error) {
	var out struct {
		Instance *instanceJSON `json:"instance"`
	}
	if err := s.c.call(ctx, "/v1/instances/get", keyArg{text(key)}, &out); err != nil {
		return nil, err
	}
	if out.Instance == nil {
		return nil, nil
	}
	rec, err := out.Instance.record()
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// Upsert inserts or fully replaces the record of rec.Key.
func (s instanceStore) Upsert(ctx context.Context, rec sbxdb.InstanceRecord) error {
	return s.c.call(ctx, "/v1/instances/upsert", fromInstance(rec), nil)
}

// Delete removes the record of key; a missing key is not an error.
func (s instanceStore) Delete(ctx context.Context, key string) error {
	return s.c.call(ctx, "/v1/instances/delete", keyArg{text(key)}, nil)
}
