package client_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// Messages cross the client and the server byte for byte, as the embedded
// store keeps them: whitespace inside and around a value, and <, > and &,
// which encoding/json would escape.
func TestMessagesByteForByte(t *testing.T) {
	ctx := t.Context()
	db := openDB(t)
	_, c := serveDB(t, db, "unix")
	msgs := []json.RawMessage{[]byte(` {"a" : 1} `), []byte(`"<&>"`), []byte("[1,\n\t2]"), []byte(`"\u00e9"`)}
	l, err := c.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", CreatedAt: 1, Reason: chain.ReasonNamed, Label: "<label>",
		Files:        []chain.Entry{{Path: "a b/ü.txt", Kind: chain.KindFile, BlobKey: testkit.FileKey(1), Size: 2}},
		Conversation: msgs}
	if _, err := c.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string]func() (*chain.Checkpoint, error){
		"client Get": func() (*chain.Checkpoint, error) { return c.Get(ctx, "c1") },
		"engine Get": func() (*chain.Checkpoint, error) { return db.Get(ctx, "c1") },
		"client List": func() (*chain.Checkpoint, error) {
			l, err := c.List(ctx, "t")
			if err != nil || len(l) != 1 {
				return nil, errors.Join(err, errors.New("List did not return one checkpoint"))
			}
			return l[0], nil
		},
	} {
		g, err := got()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d := cmp.Diff(cp, g, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s (-appended +got):\n%s", what, d)
		}
	}
	d, err := c.AcquireWriter(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	fork, err := c.Fork(ctx, chain.ForkInput{SourceThreadID: "t", SourceCheckpointID: "c1", DestinationThreadID: "d",
		DestinationCheckpointID: "d1", CreatedAt: 2, Writer: d.Writer})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(msgs, fork.Conversation); diff != "" {
		t.Errorf("fork's conversation (-want +got):\n%s", diff)
	}
	for _, thread := range []string{"d", "s"} {
		if thread == "s" {
			if err := c.SaveThread(ctx, "s", msgs); err != nil {
				t.Fatal(err)
			}
		}
		got, err := c.LoadThread(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(msgs, got); diff != "" {
			t.Errorf("transcript of %s (-want +got):\n%s", thread, diff)
		}
	}
}

// A string no JSON string can carry (bytes that are not UTF-8) reaches the
// server as "not a string": an identifier is INVALID_ID, as embedded, and
// the store is unchanged. Instance records carry any string exactly.
func TestStringsThatAreNotText(t *testing.T) {
	ctx := t.Context()
	db := openDB(t)
	_, c := serveDB(t, db, "tcp")
	l, err := c.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []chain.AppendInput{
		{Checkpoint: &chain.Checkpoint{ID: "\xff", ThreadID: "t", Reason: chain.ReasonAutomatic}, Writer: l.Writer},
		{Checkpoint: &chain.Checkpoint{ID: "c", ThreadID: "t", ParentID: "\xed\xa0\xbd\xed\xb8\x80", Reason: chain.ReasonAutomatic}, Writer: l.Writer},
		{Checkpoint: &chain.Checkpoint{ID: "c", ThreadID: "t", Reason: chain.ReasonAutomatic}, ExpectedHeadID: "a\xc3", Writer: l.Writer},
	} {
		_, embedded := db.Append(ctx, in)
		_, served := c.Append(ctx, in)
		if !errors.Is(embedded, chain.ErrInvalidID) || !errors.Is(served, chain.ErrInvalidID) {
			t.Errorf("append %+v: embedded %v, served %v; want INVALID_ID from both", in.Checkpoint, embedded, served)
		}
	}
	if _, err := c.Get(ctx, "\xff"); !errors.Is(err, chain.ErrInvalidID) {
		t.Errorf("Get(\\xff): %v, want INVALID_ID", err)
	}
	if th, _ := db.Threads(ctx); len(th) != 0 {
		t.Errorf("refused appends left threads %q", th)
	}
	rec := sbxdb.InstanceRecord{Key: "\xff\x00", Provider: "\xed\xa0\x80", ProviderSandboxID: "\xed\xa0\xbd\xed\xb8\x80", ThreadID: "é", UpdatedAt: 1 << 60}
	if err := c.Instances().Upsert(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for what, get := range map[string]func() (*sbxdb.InstanceRecord, error){
		"client": func() (*sbxdb.InstanceRecord, error) { return c.Instances().Get(ctx, rec.Key) },
		"engine": func() (*sbxdb.InstanceRecord, error) { return db.Instances().Get(ctx, rec.Key) },
	} {
		if got, err := get(); err != nil || got == nil || *got != rec {
			t.Errorf("%s Get of the record = %+v, %v; want %+v", what, got, err, rec)
		}
	}
}
