package engine_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// commitDropProxy forwards TCP to PostgreSQL. Once armed, the first
// server reply carrying CommandComplete "COMMIT" is not forwarded: the
// connection is closed instead. The server has committed; the client
// cannot know (sbxdb.ErrCommitUnknown).
type commitDropProxy struct {
	url     string
	armed   atomic.Bool
	dropped atomic.Bool
}

var commitTag = []byte("C\x00\x00\x00\x0bCOMMIT\x00")

func newCommitDropProxy(t *testing.T, dbURL string) *commitDropProxy {
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	upstream := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u.Host = ln.Addr().String()
	p := &commitDropProxy{url: u.String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(s, c); s.Close() }()
			go func() {
				defer c.Close()
				defer s.Close()
				buf := make([]byte, 64<<10)
				var tail []byte
				for {
					n, err := s.Read(buf)
					if n > 0 {
						win := append(tail, buf[:n]...)
						if p.armed.Load() && bytes.Contains(win, commitTag) && p.dropped.CompareAndSwap(false, true) {
							return // the reply to COMMIT is lost
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
						tail = append([]byte(nil), win[max(0, len(win)-16):]...)
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// A group commit of two writes (a capture and a plain append) whose COMMIT
// reached the server but whose reply was lost. Retried alone, on a store
// that is not poisoned (shared metadata), each write would be refused by
// its own stored effects (DUPLICATE_ID), and the capture's batch would
// remove the pack files its committed checkpoint names. Each must instead
// fail with ErrCommitUnknown, and the committed head must restore.
func TestSharedGroupCommitUnknownOutcome(t *testing.T) {
	ctx := t.Context()
	p := newCommitDropProxy(t, pgtest.URL(t))
	db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: p.url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lease := func(thread string) *chain.AppendInput {
		l, err := db.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		return &chain.AppendInput{Writer: l.Writer,
			Checkpoint: &chain.Checkpoint{ID: "cp-" + thread, ThreadID: thread, CreatedAt: 1, Reason: chain.ReasonAutomatic}}
	}
	inU, inV := lease("u"), lease("v")
	lt, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	content := bytes.Repeat([]byte("review data "), 100)
	if err := os.WriteFile(filepath.Join(ws, "f"), content, 0o644); err != nil {
		t.Fatal(err)
	}

	// The first append (thread u) blocks inside its transaction, alone in
	// its batch, while the capture and the second append queue behind it;
	// then it fails, so that the next COMMIT is the batch of the other two.
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	defer db.OnPoint("append.publish", func() error {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
			return errors.New("first batch fails")
		}
		return nil
	})()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); db.Append(ctx, *inU) }()
	<-entered

	var capErr, vErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, capErr = db.Capture(ctx, sbxdb.CaptureInput{Writer: lt.Writer, Dir: ws})
	}()
	go func() { defer wg.Done(); _, vErr = db.Append(ctx, *inV) }()
	for engine.QueueLen(db) < 2 {
		time.Sleep(time.Millisecond)
	}
	p.armed.Store(true)
	close(release)
	wg.Wait()
	if !p.dropped.Load() {
		t.Fatal("no COMMIT reply was dropped")
	}
	t.Logf("capture: %v", capErr)
	t.Logf("append v: %v", vErr)

	head, err := db.Head(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if vhead, _ := db.Head(ctx, "v"); vhead == "cp-v" && vErr != nil && !errors.Is(vErr, engine.ErrCommitUnknown) {
		t.Errorf("append of cp-v failed (%v) but cp-v is the head of v", vErr)
	}
	if head == "" {
		t.Fatal("the COMMIT whose reply was dropped did not commit the capture")
	}
	if capErr != nil && !errors.Is(capErr, engine.ErrCommitUnknown) {
		t.Errorf("the capture failed (%v) but its checkpoint %s is the head of t", capErr, head)
	}
	if _, err := db.Restore(ctx, head, filepath.Join(t.TempDir(), "out"), nil); err != nil {
		t.Errorf("restoring the committed head %s: %v", head, err)
	}
}
