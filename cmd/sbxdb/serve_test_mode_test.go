package main

// sbxdb serve --test as a process: its test stores live in one private
// directory of the system's temporary directory and are gone once the
// server exits on SIGTERM; a server without --test refuses them.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
)

func TestServeTestMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the child's temporary directory
	store := filepath.Join(t.TempDir(), "store")
	p := startServe(t, 1, "--test", "--db", store)
	ctx := context.Background()
	admin := p.client(t, 0, "")
	id, err := admin.CreateTestStore(ctx, client.TestStoreOptions{LeaseDuration: 100 * time.Millisecond, RenewAfter: 25 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(p.addrs[0], &client.Options{TestStore: id, Now: func() time.Time { return time.UnixMilli(1000) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.AcquireWriter(ctx, "t")
	if err != nil || l.Fence != 1 || !l.ExpiresAt().Equal(time.UnixMilli(1100)) {
		t.Fatalf("acquire in the test store at 1000: %+v, %v", l, err)
	}
	if _, err := c.PutObject(ctx, "obj/a", strings.NewReader("hello"), sbxdb.PutObjectOptions{Size: 5}); err != nil {
		t.Fatal(err)
	}
	if th, err := admin.Threads(ctx); err != nil || len(th) != 0 {
		t.Errorf("the served store's threads: %q, %v; want none", th, err)
	}

	ents, err := os.ReadDir(tmp)
	if err != nil || len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "sbxdb-test-stores-") {
		t.Fatalf("the temporary directory holds %v (%v), want the test stores' directory", ents, err)
	}
	base := filepath.Join(tmp, ents[0].Name())
	if fi, err := os.Stat(base); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the test stores' directory: %v, %v; want mode 0700", fi, err)
	}
	if _, err := os.Stat(filepath.Join(base, id, engine.DBFile)); err != nil {
		t.Errorf("the test store's database: %v", err)
	}

	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, p.stderr)
	}
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Errorf("after SIGTERM the temporary directory holds %v (%v), want nothing", ents, err)
	}
	for _, want := range []string{"msg=serving", "testStores=true", `msg="test stores" dir=` + base, "msg=stopped"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, p.stderr)
		}
	}
	// The served store kept nothing of the test store's.
	db, err := engine.Open(store, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if th, err := db.Threads(ctx); err != nil || len(th) != 0 {
		t.Errorf("the served store's threads after the server: %q, %v", th, err)
	}
}

// A server without --test refuses test stores and test mode's headers,
// and its help names --test.
func TestServeWithoutTestMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p := startServe(t, 1, "--db", filepath.Join(t.TempDir(), "store"))
	ctx := context.Background()
	if _, err := p.client(t, 0, "").CreateTestStore(ctx, client.TestStoreOptions{}); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "test stores need sbxdb serve --test") {
		t.Errorf("create a test store: %v, want ErrForbidden", err)
	}
	c, err := client.New(p.addrs[0], &client.Options{TestStore: "0123456789abcdef0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AcquireWriter(ctx, "t"); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("acquire naming a test store: %v, want ErrForbidden", err)
	}
	if ws, err := p.client(t, 0, "").Writers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("the served store's leases: %v, %v; want none", ws, err)
	}
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Errorf("the temporary directory holds %v (%v), want nothing", ents, err)
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, p.stderr)
	}

	help := ok(t, "serve", "--help")
	for _, want := range []string{"[--test]", "-test", "X-Sbxdb-Test-Store", "X-Sbxdb-Now"} {
		if !strings.Contains(help, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, help)
		}
	}
}
