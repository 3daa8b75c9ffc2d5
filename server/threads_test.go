package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/server"
)

// grow appends ids to the thread, one chain on its head, with w.
func (f *fixture) grow(w lease.Writer, ids ...string) {
	f.t.Helper()
	ctx := context.Background()
	head, err := f.db.Head(ctx, w.ThreadID)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, id := range ids {
		cp := &chain.Checkpoint{ID: id, ThreadID: w.ThreadID, ParentID: head, CreatedAt: 2, Reason: chain.ReasonAutomatic,
			Files: []chain.Entry{{Path: id, Kind: chain.KindFile, BlobKey: testkit.FileKey(len(id)), Size: 1}}}
		if _, err := f.db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w}); err != nil {
			f.t.Fatal(err)
		}
		head = id
	}
}

// client returns a Go client of the fixture's server.
func (f *fixture) client() *client.Client {
	f.t.Helper()
	c, err := client.New(f.ts.URL, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// ok sends a request that must succeed and decodes its body into out.
func (f *fixture) ok(path, body string, out any) {
	f.t.Helper()
	resp, eb, b := f.do(http.MethodPost, path, body)
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("POST %s %s: %d %s %s", path, body, resp.StatusCode, eb.Code, eb.Message)
	}
	if err := json.Unmarshal(b, out); err != nil {
		f.t.Fatalf("POST %s: body %q: %v", path, b, err)
	}
}

func TestResolveServed(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.grow(f.w, "c2", "t@")
	u, err := f.db.AcquireWriter(context.Background(), "u")
	if err != nil {
		t.Fatal(err)
	}
	f.grow(u.Writer, "dup-1", "dup-2", "dup-3")

	for ref, want := range map[string]string{
		`"c1"`: "c1", `"t@"`: "t@", `"t@~0"`: "t@", `"t@~2"`: "c1", `"dup-3"`: "dup-3", `"u@~1"`: "dup-2",
	} {
		var got struct{ ID string }
		f.ok("/v1/checkpoints/resolve", `{"ref":`+ref+`}`, &got)
		if got.ID != want {
			t.Errorf("resolve %s = %q, want %q", ref, got.ID, want)
		}
	}
	for _, c := range []struct {
		ref    string
		status int
		code   string
	}{
		{`"dup-"`, http.StatusConflict, server.CodeAmbiguous},
		{`"t@~3"`, http.StatusNotFound, chain.CodeCheckpointNotFound},
		{`"dup"`, http.StatusNotFound, chain.CodeCheckpointNotFound},
		{`"v@"`, http.StatusNotFound, chain.CodeCheckpointNotFound},
		{`""`, http.StatusBadRequest, chain.CodeInvalidID},
		{`"\ud800"`, http.StatusBadRequest, chain.CodeInvalidID},
		{`"a\u0000bcd"`, http.StatusBadRequest, chain.CodeInvalidID},
		{`7`, http.StatusBadRequest, chain.CodeInvalidID},
		{`null`, http.StatusBadRequest, chain.CodeInvalidID},
	} {
		f.refused("ref "+c.ref, http.MethodPost, "/v1/checkpoints/resolve", `{"ref":`+c.ref+`}`, c.status, c.code)
	}
	f.refused("no ref", http.MethodPost, "/v1/checkpoints/resolve", `{"REF":"c1"}`, http.StatusBadRequest, chain.CodeInvalidID)
	f.refused("not an object", http.MethodPost, "/v1/checkpoints/resolve", `["c1"]`, http.StatusBadRequest, server.CodeBadRequest)

	// Through the Go client, each error matches the engine's sentinel.
	ctx := context.Background()
	c := f.client()
	if id, err := c.ResolveCheckpoint(ctx, "u@~2"); err != nil || id != "dup-1" {
		t.Fatalf("client ResolveCheckpoint(u@~2) = %q, %v", id, err)
	}
	_, err = c.ResolveCheckpoint(ctx, "dup-")
	var ce *client.Error
	if !errors.Is(err, sbxdb.ErrAmbiguousRef) || !errors.As(err, &ce) || ce.Code != server.CodeAmbiguous || ce.Status != http.StatusConflict {
		t.Fatalf("client, ambiguous: %v", err)
	}
	_, embedded := f.db.ResolveCheckpoint(ctx, "dup-")
	if err.Error() != embedded.Error() {
		t.Errorf("served message %q, embedded %q", err, embedded)
	}
	if _, err := c.ResolveCheckpoint(ctx, "t@~9"); !errors.Is(err, chain.ErrCheckpointNotFound) {
		t.Fatalf("client, past the root: %v", err)
	}
	if _, err := c.ResolveCheckpoint(ctx, "\xff"); !errors.Is(err, chain.ErrInvalidID) {
		t.Fatalf("client, not UTF-8: %v", err)
	}
}

func TestThreadSummaryServed(t *testing.T) {
	f := newFixture(t, server.Options{})
	ctx := context.Background()
	f.grow(f.w, "c2", "c3") // createdAt 2, twice
	for body, want := range map[string]string{
		`{"threadId":"t"}`:       `{"checkpoints":3,"latestCreatedAt":2}`,
		`{"threadId":"nobody"}`:  `{"checkpoints":0,"latestCreatedAt":null}`,
		`{"threadId":"t\u00e9"}`: `{"checkpoints":0,"latestCreatedAt":null}`,
	} {
		resp, eb, b := f.do(http.MethodPost, "/v1/threads/summary", body)
		if resp.StatusCode != http.StatusOK || string(bytes.TrimSpace(b)) != want {
			t.Errorf("summary %s: %d %s %q, want %s", body, resp.StatusCode, eb.Code, b, want)
		}
	}
	for _, id := range []string{`""`, `"\ud800"`, `"a\u0000b"`, `7`, `null`, `{}`} {
		f.refused("threadId "+id, http.MethodPost, "/v1/threads/summary", `{"threadId":`+id+`}`, http.StatusBadRequest, chain.CodeInvalidID)
	}
	f.refused("no threadId", http.MethodPost, "/v1/threads/summary", `{"thread":"t"}`, http.StatusBadRequest, chain.CodeInvalidID)

	// Through the Go client: what the engine says, and its errors.
	c := f.client()
	for _, thread := range []string{"t", "nobody"} {
		got, err := c.ThreadSummary(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		want, err := f.db.ThreadSummary(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("client ThreadSummary(%q) (-engine +client):\n%s", thread, d)
		}
	}
	for _, thread := range []string{"", "a\x00b"} {
		_, err := c.ThreadSummary(ctx, thread)
		_, embedded := f.db.ThreadSummary(ctx, thread)
		if !errors.Is(err, chain.ErrInvalidID) || embedded == nil || err.Error() != embedded.Error() {
			t.Errorf("client ThreadSummary(%q): %v; embedded: %v", thread, err, embedded)
		}
	}
	// Not UTF-8: no JSON string carries it, so the server refuses
	// chain.NotAString in its place, with the same code.
	if _, err := c.ThreadSummary(ctx, "\xff"); !errors.Is(err, chain.ErrInvalidID) {
		t.Errorf("client ThreadSummary, not UTF-8: %v", err)
	}
}

func TestDeleteThreadServed(t *testing.T) {
	f := newFixture(t, server.Options{})
	ctx := context.Background()
	f.grow(f.w, "c2")
	if err := f.db.ArtifactRecords().Save(ctx, sbxdb.ArtifactRecord{ArtifactID: "art", RunID: "r", ThreadID: "t",
		BlobKey: testkit.FileKey(9), Name: "n", MimeType: "text/plain", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	bad := []string{`""`, `"\ud800"`, `7`, `null`, `{}`}
	for _, id := range bad {
		f.refused("threadId "+id, http.MethodPost, "/v1/threads/delete", `{"threadId":`+id+`,"force":true}`, http.StatusBadRequest, chain.CodeInvalidID)
		// The identifier comes before force's type.
		f.refused("threadId "+id+" and a bad force", http.MethodPost, "/v1/threads/delete", `{"threadId":`+id+`,"force":"yes"}`, http.StatusBadRequest, chain.CodeInvalidID)
	}
	for _, force := range []string{`"yes"`, `1`, `{}`, `[]`} {
		f.refused("force "+force, http.MethodPost, "/v1/threads/delete", `{"threadId":"t","force":`+force+`}`, http.StatusBadRequest, server.CodeBadRequest)
	}
	// t's writer is live: refused without force (false, null or absent).
	for _, body := range []string{`{"threadId":"t"}`, `{"threadId":"t","force":false}`, `{"threadId":"t","force":null}`} {
		f.refused("live writer "+body, http.MethodPost, "/v1/threads/delete", body, http.StatusConflict, chain.CodeWriterConflict)
	}
	if recs, _ := f.db.ArtifactRecords().ListForThread(ctx, "t"); len(recs) != 1 {
		t.Fatalf("a refused delete removed artifact records: %v", recs)
	}

	// An unknown thread: nothing deleted, not an error.
	var got struct {
		Checkpoints     []string
		Transcript      bool
		Lease           bool
		ArtifactRecords int
	}
	f.ok("/v1/threads/delete", `{"threadId":"nobody"}`, &got)
	if got.Checkpoints == nil || len(got.Checkpoints) != 0 || got.Transcript || got.Lease || got.ArtifactRecords != 0 {
		t.Fatalf("unknown thread: %+v", got)
	}

	// Through the Go client: refused, then forced.
	c := f.client()
	before := f.snapshot()
	var ce *client.Error
	if _, err := c.DeleteThread(ctx, "t", false); !errors.Is(err, chain.ErrWriterConflict) || !errors.As(err, &ce) || ce.Status != http.StatusConflict {
		t.Fatalf("client DeleteThread with a live writer: %v", err)
	}
	if d := cmp.Diff(before, f.snapshot()); d != "" {
		t.Fatalf("a refused delete changed the store:\n%s", d)
	}
	if _, err := c.DeleteThread(ctx, "", true); !errors.Is(err, chain.ErrInvalidID) {
		t.Fatalf("client DeleteThread of \"\": %v", err)
	}
	res, err := c.DeleteThread(ctx, "t", true)
	if err != nil {
		t.Fatal(err)
	}
	want := sbxdb.DeleteThreadResult{Checkpoints: []string{"c1", "c2"}, Transcript: true, Lease: true, ArtifactRecords: 1}
	if d := cmp.Diff(want, res); d != "" {
		t.Fatalf("client DeleteThread (-want +got):\n%s", d)
	}
	if th, _ := c.Threads(ctx); len(th) != 0 {
		t.Fatalf("threads after: %q", th)
	}
	if _, err := c.RenewWriter(ctx, f.w); !errors.Is(err, chain.ErrWriterLost) {
		t.Fatalf("the removed writer renews: %v", err)
	}
	rep, err := c.Check(ctx, sbxdb.CheckStoreOptions{})
	if err != nil || !rep.Clean() {
		t.Fatalf("check after: %+v, %v", rep, err)
	}
	// Again: nothing left to delete.
	if res, err = c.DeleteThread(ctx, "t", false); err != nil || len(res.Checkpoints) != 0 || res.Lease || res.Transcript {
		t.Fatalf("second delete: %+v, %v", res, err)
	}
}
