package engine_test

import (
	"errors"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
	"github.com/sbxdb/sbxdb/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// sharedSubject is subject (conformance_test.go) with the store's metadata
// in a fresh PostgreSQL database: the kit's hooks run there too.
func sharedSubject(t *testing.T, contract sbxdb.Options) *storetest.Subject {
	return sharedSubjectWith(t, engineOptions(contract))
}

// sharedSubjectWith is sharedSubject with the engine's options.
func sharedSubjectWith(t *testing.T, opts engine.Options) *storetest.Subject {
	opts.Metadata = pgtest.URL(t)
	return subjectWith(t, opts)
}

func TestSharedConformance(t *testing.T)         { storetest.RunConformance(t, sharedSubject) }
func TestSharedForkConformance(t *testing.T)     { storetest.RunForkConformance(t, sharedSubject) }
func TestSharedInstanceConformance(t *testing.T) { storetest.RunInstanceConformance(t, sharedSubject) }

// A Metadata value that is not a PostgreSQL URL is refused before anything
// is created, and compaction and migration, which only the file has, say
// so.
func TestSharedMetadataOptions(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"mysql://x/y", "postgres", "/tmp/sbx.db"} {
		if _, err := engine.Open(dir, &engine.Options{Metadata: bad}); !errors.Is(err, sbxdb.ErrInvalidOptions) {
			t.Errorf("Open with Metadata %q: %v, want ErrInvalidOptions", bad, err)
		}
	}
	url := "postgres://u:secret@127.0.0.1:1/db"
	if _, _, err := engine.Compact(t.Context(), dir, &engine.Options{Metadata: url}); !errors.Is(err, engine.ErrNotFileMetadata) {
		t.Errorf("Compact: %v, want ErrNotFileMetadata", err)
	}
	if _, _, err := engine.Migrate(t.Context(), dir, &engine.Options{Metadata: url}); !errors.Is(err, engine.ErrNotFileMetadata) {
		t.Errorf("Migrate: %v, want ErrNotFileMetadata", err)
	}
}

// Shared metadata indexes one blob store: a server whose blob directory is
// another (or new) is refused, writable or read-only, and the first keeps
// working.
func TestSharedBlobsElsewhere(t *testing.T) {
	url := pgtest.URL(t)
	first, err := engine.Open(t.TempDir(), &engine.Options{Metadata: url})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for _, ro := range []bool{false, true} {
		if db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: url, ReadOnly: ro}); !errors.Is(err, engine.ErrBlobsElsewhere) {
			if err == nil {
				db.Close()
			}
			t.Errorf("a second blob directory (read-only %v): %v, want ErrBlobsElsewhere", ro, err)
		}
	}
	if _, err := first.Head(t.Context(), "t"); err != nil {
		t.Fatalf("the first server after the refusals: %v", err)
	}
}
