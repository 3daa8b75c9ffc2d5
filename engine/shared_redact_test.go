package engine_test

import (
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// A password given as a URL parameter (libpq and pgx accept one) is shown
// by Stats, and so by sbxdb stats and every "metadata at URL" error.
func TestSharedPasswordHidden(t *testing.T) {
	url := pgtest.URL(t) + "&password=hunter2"
	db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := db.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.Metadata, "hunter2") {
		t.Fatalf("Stats().Metadata = %q shows the password", s.Metadata)
	}
}
