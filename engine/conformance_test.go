package engine_test

import (
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/storetest"
)

// subject opens a bbolt store in a temporary directory with the kit's hooks.
func subject(t *testing.T, contract sbxdb.Options) *storetest.Subject {
	return subjectWith(t, engineOptions(contract))
}

// subjectWith is subject with the engine's options.
func subjectWith(t *testing.T, opts engine.Options) *storetest.Subject {
	dir := t.TempDir()
	db, err := engine.Open(dir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	cur := db // the open handle; Reopen replaces it
	t.Cleanup(func() { cur.Close() })
	s := &storetest.Subject{
		Store:       db,
		InsertRaw:   func(cp *chain.Checkpoint) error { return cur.InsertRaw(cp) },
		SetRefCount: func(key string, n int64) error { return cur.SetRefCount(key, n) },
		OnPoint:     func(name string, fn func() error) func() { return cur.OnPoint(name, fn) },
	}
	s.Reopen = func(t *testing.T) sbxdb.Store {
		if err := cur.Close(); err != nil {
			t.Fatal(err)
		}
		next, err := engine.Open(dir, &opts)
		if err != nil {
			t.Fatal(err)
		}
		cur, s.Store = next, next
		return next
	}
	s.OpenSecond = func() error {
		o := opts
		o.LockTimeout = 50 * time.Millisecond
		second, err := engine.Open(dir, &o)
		if err == nil {
			second.Close()
		}
		return err
	}
	return s
}

func TestConformance(t *testing.T)         { storetest.RunConformance(t, subject) }
func TestForkConformance(t *testing.T)     { storetest.RunForkConformance(t, subject) }
func TestInstanceConformance(t *testing.T) { storetest.RunInstanceConformance(t, subject) }

// engineOptions are the engine's options holding the contract's.
func engineOptions(c sbxdb.Options) engine.Options {
	return engine.Options{Now: c.Now, LeaseDuration: c.LeaseDuration, RenewAfter: c.RenewAfter}
}
