package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
)

// TestMetadataUnavailable: a metadata database that is down, or lost while
// a write committed, is 503 SBXDB_UNAVAILABLE with Retry-After, and the
// message says so before the database's own words.
func TestMetadataUnavailable(t *testing.T) {
	down := fmt.Errorf("sbxdb: metadata at postgres://x: %w: begin: connection refused", engine.ErrMetadataUnavailable)
	lost := fmt.Errorf("%w (%w): commit: unexpected EOF", engine.ErrCommitUnknown, engine.ErrMetadataUnavailable)
	for _, c := range []struct {
		err    error
		prefix string
	}{
		{down, "metadata database unavailable: sbxdb: metadata at"},
		{lost, "metadata database unavailable; the write may have been committed: "},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, c.err)
		body := rec.Body.String()
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || rec.Header().Get(HeaderCode) != CodeUnavailable ||
			!strings.Contains(body, `"code":"SBXDB_UNAVAILABLE"`) || !strings.Contains(body, `"message":"`+c.prefix) ||
			!strings.HasPrefix(rec.Header().Get(HeaderMessage), c.prefix) {
			t.Errorf("writeError(%v): %d %v %s", c.err, rec.Code, rec.Header(), body)
		}
	}
	if m := Message(errors.New("plain")); m != "plain" {
		t.Errorf("Message of another error: %q", m)
	}
}
