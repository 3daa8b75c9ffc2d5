package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/capture"
)

// TestCaptureFailedAppendKeepsStatCache checks that the stat cache a
// capture writes replaces the previous one only once its checkpoint has
// committed: a capture whose append fails leaves the old cache as it was,
// and no temporary file beside it.
func TestCaptureFailedAppendKeepsStatCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(filepath.Join(dir, "store"), &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	old := time.Now().Add(-time.Hour)
	for i := range 20 {
		p := filepath.Join(ws, fmt.Sprintf("f%02d", i))
		os.MkdirAll(ws, 0o755)
		if err := os.WriteFile(p, []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, old, old)
	}
	first, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(ws)
	cachePath := capture.StatCachePath(db.dir, "t", root)
	before, err := os.ReadFile(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "f03"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The checkpoint id is taken: the append fails after every file was read.
	_, err = db.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: ws, ID: first.Checkpoint.ID})
	if !errors.Is(err, chain.ErrDuplicateID) {
		t.Fatalf("capture with a duplicate id: %v", err)
	}
	after, err := os.ReadFile(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("a failed capture replaced the stat cache")
	}
	if _, err := os.Stat(cachePath + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed capture left its stat cache's temporary file: %v", err)
	}
	res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.FilesRead != 1 {
		t.Fatalf("after the failed capture: %+v", res.Stats)
	}
}

// TestCaptureResultIsOwn checks that the checkpoint a capture returns
// shares no memory with the caller's input or with what was stored:
// changing one after the capture changes neither of the others.
func TestCaptureResultIsOwn(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(filepath.Join(dir, "store"), &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o755)
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	art, err := db.PutArtifact(ctx, ArtifactInput{ArtifactID: "a1", Name: "a", MimeType: "text/plain", Data: bytes.NewReader([]byte("art"))})
	if err != nil {
		t.Fatal(err)
	}
	in := sbxdb.CaptureInput{Writer: l.Writer, Dir: ws, Conversation: []json.RawMessage{json.RawMessage(`{"role":"user"}`)},
		Artifacts: []chain.Artifact{art}}
	res, err := db.Capture(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	want := res.Checkpoint.Clone()
	in.Conversation[0][2] = 'X'
	in.Artifacts[0].Name = "changed"
	if !reflect.DeepEqual(res.Checkpoint, want) {
		t.Fatalf("changing the input changed the result: %+v", res.Checkpoint)
	}
	res.Checkpoint.Files[0].Path = "changed"
	res.Checkpoint.Conversation[0][2] = 'Y'
	res.Checkpoint.Artifacts[0].Name = "changed"
	got, err := db.Get(ctx, want.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changing the result changed the stored checkpoint:\n%+v\nwant\n%+v", got, want)
	}
}
