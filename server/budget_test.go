package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/engine"
)

// appendBody returns the JSON of an append of root checkpoint id to
// thread, with a conversation of about size bytes, and the writer of the
// thread's lease.
func appendBody(t *testing.T, db *engine.DB, thread, id string, size int) string {
	t.Helper()
	w := writer(t, db, thread)
	var b strings.Builder
	fmt.Fprintf(&b, `{"checkpoint":{"id":%q,"threadId":%q,"parentCheckpointId":null,"createdAt":1,`+
		`"reason":"automatic","files":[],"artifacts":[],"conversation":[`, id, thread)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"%08x%s"}`, i, strings.Repeat("x", 1000))
	}
	fmt.Fprintf(&b, `]},"expectedHeadId":null,"writer":{"threadId":%q,"ownerToken":%q,"fence":%d}}`,
		w.ThreadID, w.OwnerToken, w.Fence)
	return b.String()
}

// post sends body to url, with its Content-Length unless chunked.
func post(hc *http.Client, url string, body io.Reader, size int64) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		return reply{}, err
	}
	req.ContentLength = size
	resp, err := hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}, err
}

// TestBodyBudget: while a request holds its body's share of the budget,
// another whose body does not fit waits for room, and is refused with
// 503 and Retry-After when none comes in time, having written nothing;
// one that gets room while it waits is served. A body larger than the
// whole budget is 413, and every share is given back.
func TestBodyBudget(t *testing.T) {
	const size = 1 << 20
	db := openDB(t)
	s := New(db, Options{MaxBodyBytesInFlight: 3 * size / 2})
	waiting := make(chan struct{}, 8)
	s.hooks.bodyWaiting = func() { waiting <- struct{}{} }
	_, url := tcp(t, s, "")
	url += "/v1/checkpoints/append"

	// The first request sends half its body, then stalls, holding its
	// share (all of its Content-Length).
	first := appendBody(t, db, "a", "a1", size)
	pr, pw := io.Pipe()
	firstDone := make(chan sent, 1)
	go func() {
		r, err := post(httpClient, url, pr, int64(len(first)))
		firstDone <- sent{r, err}
	}()
	if _, err := pw.Write([]byte(first[:len(first)/2])); err != nil {
		t.Fatal(err)
	}
	// A bound on liveness only, far above the milliseconds it takes.
	for deadline := time.Now().Add(time.Minute); s.body.inUse() != int64(len(first)); {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled request charged %d bytes, want its Content-Length %d", s.body.inUse(), len(first))
		}
		time.Sleep(time.Millisecond)
	}

	// A second one does not fit: it waits, then is refused.
	second := appendBody(t, db, "b", "b1", size)
	s.body.wait = time.Millisecond
	r, err := post(httpClient, url, strings.NewReader(second), int64(len(second)))
	if err != nil {
		t.Fatal(err)
	}
	if r.status != 503 || r.code(t) != CodeUnavailable || r.header.Get("Retry-After") != "1" {
		t.Fatalf("a body that does not fit: %d %s, Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
	select {
	case <-waiting:
	default:
		t.Fatal("the second request did not wait for room")
	}
	// So is one whose length is not sent, once what it read does not fit.
	r, err = post(httpClient, url, io.MultiReader(strings.NewReader(second)), -1)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != 503 || r.code(t) != CodeUnavailable {
		t.Fatalf("a chunked body that does not fit: %d %s", r.status, r.body)
	}
	<-waiting
	if h := head(t, db, "b"); h != "" {
		t.Fatalf("a refused append wrote: thread b's head is %q", h)
	}
	// A body larger than the budget could never fit.
	huge := appendBody(t, db, "c", "c1", 2*size)
	if r, err := post(httpClient, url, strings.NewReader(huge), int64(len(huge))); err != nil || r.status != 413 || r.code(t) != CodeTooLarge {
		t.Fatalf("a body over the budget: %d %s, %v", r.status, r.body, err)
	}

	// One that gets room while it waits is served.
	s.body.wait = time.Hour
	secondDone := make(chan sent, 1)
	go func() {
		r, err := post(httpClient, url, strings.NewReader(second), int64(len(second)))
		secondDone <- sent{r, err}
	}()
	<-waiting
	if _, err := pw.Write([]byte(first[len(first)/2:])); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	for _, ch := range []chan sent{firstDone, secondDone} {
		if r := <-ch; r.err != nil || r.status != 200 {
			t.Fatalf("append: %d %s, %v", r.status, r.body, r.err)
		}
	}
	if a, b := head(t, db, "a"), head(t, db, "b"); a != "a1" || b != "b1" {
		t.Fatalf("heads %q and %q, want a1 and b1", a, b)
	}
	if n := s.body.inUse(); n != 0 {
		t.Fatalf("%d bytes still charged once every request returned", n)
	}
}
