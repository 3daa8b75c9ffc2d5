package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
)

// TestStoreNeverCapturedNorRestoredInto: on TCP, a capture of a directory
// that is the store, holds it or lies within it, and a restore into one,
// are refused SBXDB_FORBIDDEN and change nothing, however symlinks spell
// either path: --db through a symlink, the request through another.
func TestStoreNeverCapturedNorRestoredInto(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "data", "real", "store")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(real, 0o755))
	dbLink := filepath.Join(root, "db")
	must(os.Symlink(real, dbLink))
	alias := filepath.Join(root, "alias")
	must(os.Symlink(filepath.Join(root, "data", "real"), alias))
	db, err := engine.Open(dbLink, &engine.Options{NoSync: true})
	must(err)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	w := writer(t, db, "main")
	ws := filepath.Join(root, "ws")
	must(os.CopyFS(ws, os.DirFS(tree(t, 2, 5))))

	c, _ := tcp(t, New(db, Options{AllowDirs: []string{root}}), "")
	res, err := c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: ws, ID: "cp1"})
	if err != nil || res.Stats.Files != 2 {
		t.Fatalf("capture of a workspace beside the store: %+v, %v", res, err)
	}
	sub := ""
	ents, err := os.ReadDir(real)
	must(err)
	for _, e := range ents {
		if e.IsDir() {
			sub = e.Name()
			break
		}
	}
	if sub == "" {
		t.Fatalf("the store %s holds no directory to name", real)
	}
	listing := func() map[string]bool {
		seen := map[string]bool{}
		filepath.WalkDir(root, func(p string, _ os.DirEntry, _ error) error {
			seen[p] = true
			return nil
		})
		return seen
	}
	before := listing()
	for _, dir := range []string{
		filepath.Join(root, "data"),               // holds the store below it
		filepath.Join(root, "data", "real"),       // its parent
		filepath.Join(alias),                      // its parent, through a second symlink
		filepath.Join(alias, "store"),             // the store, through the second symlink
		dbLink,                                    // the store, as --db names it
		real,                                      // the store, resolved
		filepath.Join(dbLink, sub),                // within the store
		filepath.Join(alias, "store", sub),        // within it, through the second symlink
		filepath.Join(root, "data", "..", "data"), // spelled with ..
		root, // the allowed prefix itself holds it
	} {
		_, err := c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir})
		wantCode(t, "capture of "+dir, err, CodeForbidden, client.ErrForbidden)
		if h := head(t, db, "main"); h != "cp1" {
			t.Fatalf("a refused capture of %s made %q the head", dir, h)
		}
	}
	for _, dir := range []string{
		filepath.Join(dbLink, "r1"),
		filepath.Join(dbLink, "r2", "deeper"),
		filepath.Join(alias, "store", "r3"),
		filepath.Join(real, sub, "r4"),
		filepath.Join(alias, "store", sub),
		filepath.Join(root, "data"),
		alias,
	} {
		_, err := c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: dir})
		wantCode(t, "restore into "+dir, err, CodeForbidden, client.ErrForbidden)
	}
	after := listing()
	for p := range after {
		if !before[p] && filepath.Dir(p) != filepath.Join(real, "meta") {
			t.Errorf("a refused request made %s", p)
		}
	}
	st, err := c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: filepath.Join(root, "data", "out")})
	if err != nil || st.Files != 2 {
		t.Fatalf("restore beside the store: %+v, %v", st, err)
	}
}
