package main

import (
	neturl "net/url"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// A command given the directory of a store whose metadata is in a
// database, without --metadata, is a usage error naming the flag and the
// database's URL, without its password: not a lost database.
func TestSharedDirWithoutMetadata(t *testing.T) {
	u, err := neturl.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.UserPassword(u.User.Username(), "s3cret") // the test cluster trusts: unused
	dir := t.TempDir()
	db, err := engine.Open(dir, &engine.Options{Metadata: u.String(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	u.User = neturl.User(u.User.Username())
	for _, args := range [][]string{
		{"threads", "--db", dir},                               // reads
		{"gc", "--db", dir, "--older-than", "24h"},             // writes an existing store
		{"capture", "--db", dir, "--thread", "t", t.TempDir()}, // may create one
	} {
		code, _, stderr := runArgs(args)
		if code != exitUsage {
			t.Errorf("sbxdb %s: exit %d, want %d (usage); stderr %q", args[0], code, exitUsage, stderr)
		}
		if want := "add --metadata " + u.String(); !strings.Contains(stderr, want) {
			t.Errorf("sbxdb %s: stderr %q does not say %q", args[0], stderr, want)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("sbxdb %s: stderr %q shows the password", args[0], stderr)
		}
	}
	// With --metadata, the directory opens.
	if code, _, stderr := runArgs([]string{"threads", "--db", dir, "--metadata", u.String()}); code != 0 {
		t.Errorf("sbxdb threads --metadata: exit %d, %s", code, stderr)
	}
}
