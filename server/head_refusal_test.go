package server

import (
	"context"
	"testing"

	"github.com/sbxdb/sbxdb/client"
)

// TestHeadRefusedBeforeItsHandler: the refusals the middleware makes for
// every route (a missing token, a server that stops) reach a HEAD of a
// blob, whose response has no body, with their code in X-Sbxdb-Code as the
// blob handlers' own refusals do (docs/API.md, Errors): a Go client's
// StatObject then fails with the same sentinel as every other call, and
// nothing is refreshed.
func TestHeadRefusedBeforeItsHandler(t *testing.T) {
	db := openDB(t)
	s := New(db, Options{Token: "s3cret"})
	ctx := context.Background()
	_, url := tcp(t, s, "s3cret")
	bad, err := client.New(url, &client.Options{Token: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bad.Close() })
	_, err = bad.StatObject(ctx, "a/b")
	wantCode(t, "HEAD with a wrong token", err, CodeUnauthorized, client.ErrUnauthorized)

	good, err := client.New(url, &client.Options{Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { good.Close() })
	s.stopping.Store(true)
	_, err = good.StatObject(ctx, "a/b")
	wantCode(t, "HEAD while the server stops", err, CodeUnavailable, client.ErrUnavailable)
}
