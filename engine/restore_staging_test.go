package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
)

// A restore removes, beside its target, the staging directories of
// restores whose process is provably gone, and nothing else: not a live
// process's, not one of a process this host cannot judge, not a name that
// does not parse, not a symlink; and it follows no symlink inside what it
// removes.
func TestRestoreRemovesStaleStagingDirs(t *testing.T) {
	me := proc.Self()
	if me.Start == 0 || me.Host == "" {
		t.Skip("this system does not give a process's start time or host name: no staging directory can be proven stale")
	}
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "a.txt", []byte("a"), 0o644)
	id := f.capture(t, ws).Checkpoint.ID

	parent := filepath.Join(f.dir, "out")
	outside := filepath.Join(f.dir, "outside")
	write(t, outside, "keep.txt", []byte("must survive"), 0o644)
	mkdir := func(name string) string {
		p := filepath.Join(parent, name)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, p, "sub/partial.bin", []byte("half a file"), 0o644)
		// A symlink inside, as a restore makes: removing the directory
		// must not follow it.
		if err := os.Symlink(outside, filepath.Join(p, "link")); err != nil {
			t.Fatal(err)
		}
		return name
	}
	reused := me // the same pid, started at another time: a later process
	reused.Start++
	rebooted := me // a boot id not this one's may be another machine's
	rebooted.Boot = "an earlier boot"
	rebooted.Start++
	otherNS := me // a pid of another namespace cannot be looked up here
	otherNS.NS = "pid:[1]"
	otherNS.Start++
	otherHost := me
	otherHost.Host = "other-host"
	otherHost.Start++

	stale := []string{
		mkdir(engine.StagingName(reused) + "123"),
	}
	// A staging directory whose owner looks gone but still holds its lock
	// (a restore in a namespace that names it in a way this process
	// misjudges) is never removed.
	locked := mkdir(engine.StagingName(reused) + "4242")
	lockFile, err := os.Open(filepath.Join(parent, locked))
	if err != nil {
		t.Fatal(err)
	}
	defer lockFile.Close()
	if err := syscall.Flock(int(lockFile.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	kept := []string{
		locked,
		mkdir(engine.StagingName(me) + "789"), // alive: this process
		mkdir(engine.StagingName(rebooted) + "456"), // unknown: another boot, maybe another machine
		mkdir(engine.StagingName(otherNS) + "457"),  // unknown: another pid namespace
		mkdir(engine.StagingName(otherHost) + "1"),  // unknown: another host
		mkdir(".sbxdb-restore-123456"),              // does not parse
		mkdir(engine.StagingName(reused) + "12x"),   // does not parse
		mkdir(engine.StagingName(reused) + "1-2"),   // does not parse
		mkdir(".sbxdb-restore-zz-" + engine.StagingName(reused)[len(".sbxdb-restore-"):] + "7"),
	}
	// A symlink under a stale name is not a staging directory: neither it
	// nor its target is removed.
	link := engine.StagingName(reused) + "99"
	if err := os.Symlink(outside, filepath.Join(parent, link)); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, link)

	if _, err := f.db.Restore(context.Background(), id, filepath.Join(parent, "tree"), nil); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	want := append(slices.Clone(kept), "tree")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("after the restore %s holds\n%q\nwant\n%q (stale: %q)", parent, got, want, stale)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep.txt")); err != nil || string(b) != "must survive" {
		t.Errorf("a file a stale staging directory linked to: %q, %v", b, err)
	}
}
