package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// TestRemoteEntry: the bytes of a served blob are checked against the
// entry's size and key, and every failure is worded as engine.DB.OpenEntry
// words it.
func TestRemoteEntry(t *testing.T) {
	const content = "hello\n"
	e := &chain.Entry{Path: "README.md", Kind: chain.KindFile, Size: int64(len(content)), BlobKey: testkit.FileKeyOf(content)}
	damaged := `SANDBOX_SNAPSHOT_INVALID_BLOB: "README.md": blob ` + e.BlobKey + " is damaged: "
	for _, tc := range []struct {
		name string
		body io.Reader
		want string // the error's text; "" for none
	}{
		{"whole", strings.NewReader(content), ""},
		{"one byte at a time", iotest.OneByteReader(strings.NewReader(content)), ""},
		{"other bytes", strings.NewReader("HELLO\n"), damaged + "blob corrupt: sha256 of the bytes does not match the key"},
		{"cut off", strings.NewReader(content[:3]), damaged + "the server cut the body off before its end"},
		{"too long", strings.NewReader(content + "x"), damaged + "the server sent more bytes than the blob has"},
		{"read error", io.MultiReader(strings.NewReader("he"), iotest.ErrReader(errors.New("connection reset"))), damaged + "connection reset"},
	} {
		re := &remoteEntry{r: io.NopCloser(tc.body), e: e, h: sha256.New(), left: e.Size}
		var out bytes.Buffer
		_, err := io.Copy(&out, re)
		switch {
		case tc.want == "" && (err != nil || out.String() != content):
			t.Errorf("%s: %q, %v", tc.name, out.String(), err)
		case tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, chain.ErrInvalidBlob)):
			t.Errorf("%s: %v, want %q (INVALID_BLOB)", tc.name, err, tc.want)
		case tc.want != "":
			// The failure sticks.
			if _, again := re.Read(make([]byte, 8)); again != err {
				t.Errorf("%s: read after the failure: %v", tc.name, again)
			}
		}
	}
}

func TestRemoteBlobError(t *testing.T) {
	e := &chain.Entry{Path: "a.txt", Kind: chain.KindFile, Size: 1, BlobKey: testkit.FileKeyOf("a")}
	prefix := `"a.txt": blob ` + e.BlobKey
	unavailable := &client.Error{Status: 503, Code: "SBXDB_UNAVAILABLE", Message: "shutting down"}
	for _, tc := range []struct {
		err  error
		is   error
		want string
	}{
		{&client.Error{Status: 404, Code: "SBXDB_NOT_FOUND", Message: "no blob"}, chain.ErrMissingBlob,
			"SANDBOX_SNAPSHOT_MISSING_BLOB: " + prefix + " is missing"},
		{sbxdb.ErrBlobNotFound, chain.ErrMissingBlob, "SANDBOX_SNAPSHOT_MISSING_BLOB: " + prefix + " is missing"},
		{unavailable, nil, "shutting down"},
		{&client.Error{Status: 422, Code: chain.CodeInvalidBlob, Message: "SANDBOX_SNAPSHOT_INVALID_BLOB: cas: " + e.BlobKey + ": blob corrupt: checksum"}, chain.ErrInvalidBlob,
			"SANDBOX_SNAPSHOT_INVALID_BLOB: " + prefix + " is damaged: blob corrupt: checksum"},
		{client.ErrUnreachable, nil, client.ErrUnreachable.Error()},
		{io.ErrUnexpectedEOF, chain.ErrInvalidBlob, "SANDBOX_SNAPSHOT_INVALID_BLOB: " + prefix + " is damaged: the server cut the body off before its end"},
	} {
		got := remoteBlobError(e, tc.err)
		if got.Error() != tc.want || (tc.is != nil && !errors.Is(got, tc.is)) || (tc.is == nil && got != tc.err) {
			t.Errorf("remoteBlobError(%v) = %v, want %q", tc.err, got, tc.want)
		}
	}
}

// TestStaleSocket: a socket file nobody answers on, or a server that does
// not answer in time, is no server; the command opens the store's files.
func TestStaleSocket(t *testing.T) {
	dir := newStore(t)
	want := ok(t, "refs", "--db", dir)
	sock := filepath.Join(dir, socketName)

	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if out := ok(t, "refs", "--db", dir); out != want {
		t.Errorf("refs beside a stale socket:\n%s\nwant:\n%s", out, want)
	}
	os.Remove(sock)

	// A listener that never answers: the probe gives up.
	l, err = net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer func(d time.Duration) { probeTimeout = d }(probeTimeout)
	probeTimeout = 50 * time.Millisecond
	if out := ok(t, "refs", "--db", dir); out != want {
		t.Errorf("refs beside a silent socket:\n%s\nwant:\n%s", out, want)
	}
}

// TestNamedServer: a server named by --server or $SBXDB_SERVER must answer;
// the command fails, changing nothing, rather than open the files.
func TestNamedServer(t *testing.T) {
	store, ws := captured(t, "cp1")
	before := ok(t, "threads", "--db", store, "--json")
	defer func(d time.Duration) { serverTimeout = d }(serverTimeout)
	serverTimeout = 200 * time.Millisecond
	gone := "unix:" + filepath.Join(t.TempDir(), "gone.sock")
	for _, args := range [][]string{
		{"threads"},
		{"capture", ws, "--thread", "main", "--id", "cp2"},
		{"unlock", "main"},
		{"compact"},
	} {
		msg := fail(t, append(args, "--db", store, "--server", gone)...)
		if want := "sbxdb: server " + gone + " does not answer: "; !strings.HasPrefix(msg, want) {
			t.Errorf("%s --server %s: %q, want %q…", args[0], gone, msg, want)
		}
		t.Setenv(serverEnv, gone)
		if msg2 := fail(t, append(args, "--db", store)...); msg2 != msg {
			t.Errorf("%s with $%s: %q, want %q", args[0], serverEnv, msg2, msg)
		}
		t.Setenv(serverEnv, "")
		// A malformed address is a usage error.
		code, _, errOut := cli(t, append(args, "--db", store, "--server", "localhost:1")...)
		first, _, _ := strings.Cut(errOut, "\n")
		if want := `: --server: address "localhost:1" is not unix:PATH, tcp:HOST:PORT or http://HOST:PORT`; code != exitUsage || !strings.HasSuffix(first, want) {
			t.Errorf("%s with a malformed address: exit %d, %q; want exit 2 and …%q", args[0], code, errOut, want)
		}
	}
	if after := ok(t, "threads", "--db", store, "--json"); after != before {
		t.Errorf("failed commands changed the store:\n%s\nwas:\n%s", after, before)
	}
}
