package capture_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
	icapture "github.com/sbxdb/sbxdb/internal/capture"
	"github.com/sbxdb/sbxdb/workspace"
)

// TestCaptureRehash checks CaptureInput.Rehash against the one thing the
// stat cache cannot see: bytes that changed while the stat stayed as it
// was (a write through a shared mmap to pages already dirty). That is
// simulated honestly here by writing the file and then giving its cache
// entry the file's new stat, which is what such a write leaves behind:
// a stat the cache holds, with a digest of other bytes.
func TestCaptureRehash(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.Open(filepath.Join(dir, "store"), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	const files = 40
	old := time.Now().Add(-time.Hour)
	for i := range files {
		p := filepath.Join(ws, fmt.Sprintf("d%d/f%02d", i%3, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(strings.Repeat(fmt.Sprint(i), 50)), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, old, old) // outside the racy window
	}
	capture := func(rehash bool) *sbxdb.CaptureResult {
		t.Helper()
		res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: ws, Rehash: rehash})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if first := capture(false); first.Stats.FilesRead != files {
		t.Fatalf("first capture: %+v", first.Stats)
	}
	if res := capture(false); res.Stats.FilesRead != 0 || res.Stats.Unchanged != files {
		t.Fatalf("unchanged tree: %+v", res.Stats)
	}
	// With Rehash every file is read again, and nothing new is stored.
	res := capture(true)
	if res.Stats.FilesRead != files || res.Stats.Unchanged != 0 || res.Stats.BlobsNew != 0 || res.Stats.Deduplicated != files {
		t.Fatalf("rehash of an unchanged tree: %+v", res.Stats)
	}

	// The bytes change, the cache entry gets the file's new stat.
	edited := "d1/f07"
	p := filepath.Join(ws, edited)
	content := []byte(strings.Repeat("Z", 50)) // the size it had
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, old, old)
	root, _ := filepath.Abs(ws)
	sub, err := os.Open(filepath.Join(root, "d1"))
	if err != nil {
		t.Fatal(err)
	}
	cachePath := icapture.StatCachePath(db.Dir(), "t", root)
	forged, err := icapture.ForgeCachedStat(cachePath, workspace.NewRedactor(nil).Fingerprint(), edited, sub, "f07")
	sub.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !forged {
		t.Fatalf("%s not in the stat cache", edited)
	}

	want := cas.Files.Key(sha256.Sum256(content))
	// Without Rehash the cache is trusted: the limit capture_statcache.go states.
	if res := capture(false); res.Stats.FilesRead != 0 || keyOf(res, edited) == want {
		t.Fatalf("the forged cache entry was not trusted (%+v): the test no longer simulates the case", res.Stats)
	}
	res = capture(true)
	if res.Stats.FilesRead != files || res.Stats.BlobsNew != 1 || keyOf(res, edited) != want {
		t.Fatalf("rehash after a change the stat did not show: %+v, %s recorded as %s, want %s", res.Stats, edited, keyOf(res, edited), want)
	}
	// The rehash left a cache with the right digest.
	if res := capture(false); res.Stats.FilesRead != 0 || keyOf(res, edited) != want {
		t.Fatalf("after the rehash: %+v", res.Stats)
	}
}

func keyOf(res *sbxdb.CaptureResult, path string) string {
	for _, e := range res.Checkpoint.Files {
		if e.Path == path {
			return e.BlobKey
		}
	}
	return ""
}
