package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/client"
)

// testStoreDirs returns the directories of test stores in tmp.
func testStoreDirs(t *testing.T, tmp string) []string {
	t.Helper()
	ents, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "sbxdb-test-stores-") {
			dirs = append(dirs, filepath.Join(tmp, e.Name()))
		}
	}
	return dirs
}

// The test stores of a server killed with SIGKILL are removed when the
// next serve --test starts, and those of a server still running are not;
// nor is a directory without an owner lock that changed recently (made by
// an older server, or being made), while one unchanged for long is.
func TestServeRemovesAbandonedTestStores(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the children's temporary directory
	ctx := context.Background()

	killed := startServe(t, 1, "--test", "--db", filepath.Join(t.TempDir(), "store"))
	for range 5 {
		if _, err := killed.client(t, 0, "").CreateTestStore(ctx, client.TestStoreOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dead := testStoreDirs(t, tmp)
	if len(dead) != 1 {
		t.Fatalf("test store directories %q, want one", dead)
	}
	live := startServe(t, 1, "--test", "--db", filepath.Join(t.TempDir(), "store"))
	id, err := live.client(t, 0, "").CreateTestStore(ctx, client.TestStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alive := slices.DeleteFunc(testStoreDirs(t, tmp), func(d string) bool { return d == dead[0] })
	if len(alive) != 1 {
		t.Fatalf("test store directories %q beside %s, want one", alive, dead[0])
	}
	killed.cmd.Process.Kill()
	<-killed.exited
	if _, err := os.Stat(dead[0]); err != nil {
		t.Fatalf("the killed server's test stores: %v; SIGKILL leaves them", err)
	}
	// Older servers' directories, without an owner lock: one just
	// changed, one unchanged for a day.
	recent, stale := filepath.Join(tmp, "sbxdb-test-stores-recent"), filepath.Join(tmp, "sbxdb-test-stores-stale")
	for _, d := range []string{recent, stale} {
		if err := os.MkdirAll(filepath.Join(d, "0123"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	day := time.Now().Add(-24 * time.Hour)
	if err := os.Chtimes(stale, day, day); err != nil {
		t.Fatal(err)
	}

	next := startServe(t, 1, "--test", "--db", filepath.Join(t.TempDir(), "store"))
	got := testStoreDirs(t, tmp)
	if want := []string{alive[0], recent}; !slices.Equal(got, want) {
		t.Errorf("after the next start, test store directories %q, want %q", got, want)
	}
	c, err := client.New(live.addrs[0], &client.Options{TestStore: id})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AcquireWriter(ctx, "t"); err != nil {
		t.Errorf("the running server's test store: %v", err)
	}
	if code := next.stop(t, os.Interrupt); code != 0 || !strings.Contains(next.stderr.String(), "abandonedTestStoresRemoved=2") {
		t.Errorf("exit %d; stderr:\n%s", code, next.stderr)
	}
}
