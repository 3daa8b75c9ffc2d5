package memstore

import (
	"context"

	"github.com/sbxdb/sbxdb"
)

// instanceStore is the SandboxInstanceStore view of a Store (SPEC §4). It
// validates nothing: any key, the empty one included, is accepted. Records
// are plain values, so storing and returning them copies them.
type instanceStore struct{ s *Store }

// Get returns a copy of the record of key, or nil and no error when there is
// none.
func (is instanceStore) Get(ctx context.Context, key string) (*sbxdb.InstanceRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := is.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.instances[key]
	if !ok {
		return nil, nil
	}
	return &rec, nil
}

// Upsert inserts rec or fully replaces the record of rec.Key: optional
// fields left empty are cleared, never merged.
func (is instanceStore) Upsert(ctx context.Context, rec sbxdb.InstanceRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := is.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances[rec.Key] = rec
	return nil
}

// Delete removes the record of key; a missing key is not an error.
func (is instanceStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := is.s
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.instances, key)
	return nil
}
