package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
)

func TestHealthAndStats(t *testing.T) {
	db := openDB(t)
	appendN(t, db, writer(t, db, "main"), 2)
	c, _ := tcp(t, New(db, Options{Version: "v9.9.9"}), "")
	ctx := context.Background()
	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(db.Dir())
	if want := (client.Health{OK: true, Version: "v9.9.9", Format: engine.FormatVersion, Store: abs}); h != want {
		t.Errorf("health %+v, want %+v", h, want)
	}
	got, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := db.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || got.Checkpoints != 2 {
		t.Errorf("stats through the server %+v, embedded %+v", got, want)
	}
}

func TestGC(t *testing.T) {
	db := openDB(t)
	appendN(t, db, writer(t, db, "t"), 3)
	s := New(db, Options{})
	c, url := tcp(t, s, "")
	ctx := context.Background()
	list := func() int {
		cps, err := db.List(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		return len(cps)
	}

	// Bad input changes nothing.
	for _, body := range []string{
		`{"retain": true, "keep": -1, "immediate": true}`,
		`{"retain": true, "keep": 1, "olderThanMs": -1}`,
		`{"retain": true, "keep": 1, "olderThanMs": 9223372036855, "immediate": true}`,
		`{"retain": true, "keep": 1, "repackThreshold": 2, "immediate": true}`,
		`{"retain": true, "keep": "one"}`,
		`{"retain": true, "keep": 1}`, // no window and not immediate
		`[1]`,
		``,
	} {
		r := do(t, httpClient, "POST", url+"/v1/gc", body)
		if r.status != 400 || r.code(t) != CodeBadRequest {
			t.Errorf("gc %s: %d %s", body, r.status, r.body)
		}
		if n := list(); n != 3 {
			t.Fatalf("gc %s left %d checkpoints of 3", body, n)
		}
	}

	// The lease is live: retention skips the thread as busy.
	res, err := c.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Retention.Busy, []string{"t"}) || list() != 3 {
		t.Errorf("gc with a live lease: %+v, %d checkpoints", res.Retention, list())
	}
	if _, err := db.Unlock(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	plan, err := c.PlanGC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"t-0", "t-1"}; !reflect.DeepEqual(plan.Retention.Deleted["t"], want) || list() != 3 {
		t.Errorf("dry run: deleted %v (want %v reported), %d checkpoints left (want 3)", plan.Retention.Deleted, want, list())
	}
	res, err = c.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"t-0", "t-1"}; !reflect.DeepEqual(res.Retention.Deleted["t"], want) || list() != 1 {
		t.Errorf("gc: deleted %v, want %v; %d checkpoints left", res.Retention.Deleted, want, list())
	}
}

// httpClient sends raw requests to the TCP test servers.
var httpClient = &http.Client{}

func TestSweep(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	dir := tree(t, 20, 100)
	s := New(db, Options{})
	u := serveUnix(t, s)
	ctx := context.Background()
	res, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, ID: "cp1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteHead(ctx, "main", "cp1", w); err != nil {
		t.Fatal(err)
	}
	blobs := func() int {
		st, err := db.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Blobs
	}
	n := blobs()
	if n != res.Stats.BlobsNew || n == 0 {
		t.Fatalf("%d blobs stored, the capture wrote %d", n, res.Stats.BlobsNew)
	}
	// No window and not immediate: refused, nothing deleted.
	_, err = u.c.Sweep(ctx, sbxdb.SweepOptions{})
	wantCode(t, "sweep without a window", err, CodeBadRequest, client.ErrBadRequest)
	if blobs() != n {
		t.Fatal("a refused sweep deleted blobs")
	}
	dry, err := u.c.Sweep(ctx, sbxdb.SweepOptions{Immediate: true, DryRun: true})
	if err != nil || len(dry.Deleted) != n || blobs() != n {
		t.Fatalf("dry sweep: %+v, %v; %d blobs left of %d", dry, err, blobs(), n)
	}
	got, err := u.c.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
	if err != nil || len(got.Deleted) != n || got.Bytes <= 0 || blobs() != 0 {
		t.Fatalf("sweep: %+v, %v; %d blobs left", got, err, blobs())
	}
	m := scrape(t, u)
	for _, want := range []string{`sbxdb_gc_runs_total{kind="sweep"} 1`, `sbxdb_gc_freed_bytes_total{kind="sweep"} ` + itoa(got.Bytes)} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestCheck(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	s := New(db, Options{})
	u := serveUnix(t, s)
	ctx := context.Background()
	if _, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: tree(t, 30, 50), ID: "cp1"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports [][2]int
	rep, err := u.c.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true, Progress: func(done, total int) {
		mu.Lock()
		reports = append(reports, [2]int{done, total})
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || !rep.Verified || rep.Checkpoints != 1 || rep.Blobs != 30 {
		t.Errorf("check: %+v", rep)
	}
	if len(reports) == 0 || reports[len(reports)-1] != [2]int{30, 30} {
		t.Errorf("progress reports %v, want them to end at 30 of 30", reports)
	}
	// Without a progress callback: the report alone.
	plain, err := u.c.Check(ctx, sbxdb.CheckStoreOptions{})
	if err != nil || !plain.Clean() || plain.Verified {
		t.Errorf("check without progress: %+v, %v", plain, err)
	}
	// The raw stream: progress lines, then the result.
	r := do(t, u.http, "POST", "http://sbxdb/v1/check", `{"verifyBlobs": true}`, "Accept", "application/x-ndjson")
	if r.status != 200 || r.header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("stream: %d %q", r.status, r.header.Get("Content-Type"))
	}
	ls := lines(t, r.body)
	var last struct{ Done, Total int }
	if err := json.Unmarshal(ls[len(ls)-2]["progress"], &last); err != nil || last.Done != 30 || last.Total != 30 {
		t.Errorf("last progress line %s (%v)", ls[len(ls)-2]["progress"], err)
	}
	var res sbxdb.CheckReport
	if err := json.Unmarshal(ls[len(ls)-1]["result"], &res); err != nil || !res.Clean() || !res.Verified {
		t.Errorf("result line %s (%v)", ls[len(ls)-1]["result"], err)
	}
}

func TestCaptureAndRestore(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	dir := tree(t, 50, 3000)
	u := serveUnix(t, New(db, Options{}))
	ctx := context.Background()

	var last sbxdb.Progress
	res, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, ID: "cp1", Label: "first", Reason: chain.ReasonNamed,
		SourceRunID: "run-1", Excludes: []string{"d3/"}, Progress: func(p sbxdb.Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	cp := res.Checkpoint
	if cp.ID != "cp1" || cp.Label != "first" || cp.Reason != chain.ReasonNamed || cp.SourceRunID != "run-1" || head(t, db, "main") != "cp1" {
		t.Errorf("captured %+v; head %q", cp, head(t, db, "main"))
	}
	if res.Stats.Files != 43 || !last.Done || last.Files != 43 || last.TotalFiles != 43 {
		t.Errorf("stats %+v, last progress %+v; want 43 files (50 less d3's 7)", res.Stats, last)
	}
	stored, err := db.Get(ctx, "cp1")
	if err != nil || !reflect.DeepEqual(stored, cp) {
		t.Errorf("the result's checkpoint %+v differs from the stored one %+v (%v)", cp, stored, err)
	}

	// Restore with the capture's globs; a missing checkpoint and a policy
	// that differs are refused, and leave no directory.
	out := filepath.Join(t.TempDir(), "out")
	_, err = u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "nope", Dir: out, Excludes: []string{"d3/"}})
	wantCode(t, "restore of a missing checkpoint", err, chain.CodeCheckpointNotFound, chain.ErrCheckpointNotFound)
	_, err = u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: out, Excludes: []string{"["}})
	wantCode(t, "restore with a bad glob", err, CodeBadRequest, client.ErrBadRequest)
	_, err = u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: "relative/out"})
	wantCode(t, "restore to a relative path", err, CodeBadRequest, client.ErrBadRequest)
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused restores made %s: %v", out, err)
	}
	var reports int
	st, err := u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: out, Excludes: []string{"d3/"},
		Progress: func(sbxdb.Progress) { reports++ }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 43 || reports == 0 {
		t.Errorf("restore stats %+v after %d progress reports", st, reports)
	}
	for _, e := range cp.Files {
		a, _ := os.ReadFile(filepath.Join(dir, e.Path))
		b, err := os.ReadFile(filepath.Join(out, e.Path))
		if err != nil || string(a) != string(b) {
			t.Fatalf("restored %s differs (%v)", e.Path, err)
		}
	}

	// The raw stream of a capture: progress lines, then the result.
	r := do(t, u.http, "POST", "http://sbxdb/v1/capture", `{"writer": `+mustJSON(t, w)+`, "dir": "`+dir+`", "id": "cp2"}`,
		"Accept", "application/x-ndjson")
	ls := lines(t, r.body)
	var p struct {
		Files, TotalFiles int
		Done              bool
	}
	if err := json.Unmarshal(ls[len(ls)-2]["progress"], &p); err != nil || !p.Done || p.Files != 50 || p.TotalFiles != 50 {
		t.Errorf("last progress line %s (%v)", ls[len(ls)-2]["progress"], err)
	}
	var result struct {
		Checkpoint struct{ ID, ParentCheckpointID string }
		Stats      sbxdb.CaptureStats
		Warnings   []sbxdb.CaptureWarning
	}
	if err := json.Unmarshal(ls[len(ls)-1]["result"], &result); err != nil || result.Checkpoint.ID != "cp2" ||
		result.Checkpoint.ParentCheckpointID != "cp1" || result.Warnings == nil || head(t, db, "main") != "cp2" {
		t.Errorf("result line %s (%v)", ls[len(ls)-1]["result"], err)
	}
	if m := scrape(t, u); !strings.Contains(m, "\nsbxdb_appends_total 2\n") {
		t.Error("metrics do not count the two captures as appends")
	}
}

// A capture the engine refuses after the stream began ends the stream with
// the error line; without a stream the error has its status.
func TestCaptureErrorMidStream(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	lost := w
	lost.Fence++
	dir := tree(t, 5, 10)
	u := serveUnix(t, New(db, Options{}))
	ctx := context.Background()

	_, err := u.c.Capture(ctx, client.CaptureRequest{Writer: lost, Dir: dir, Progress: func(sbxdb.Progress) {}})
	wantCode(t, "streamed capture with a lost lease", err, chain.CodeWriterLost, chain.ErrWriterLost)
	if chain.Code(err) != chain.CodeWriterLost {
		t.Errorf("chain.Code = %q", chain.Code(err))
	}
	_, err = u.c.Capture(ctx, client.CaptureRequest{Writer: lost, Dir: dir})
	wantCode(t, "capture with a lost lease", err, chain.CodeWriterLost, chain.ErrWriterLost)
	if ce := (*client.Error)(nil); !errors.As(err, &ce) || ce.Status != 409 {
		t.Errorf("status %+v, want 409", err)
	}
	r := do(t, u.http, "POST", "http://sbxdb/v1/capture", `{"writer": `+mustJSON(t, lost)+`, "dir": "`+dir+`"}`,
		"Accept", "application/x-ndjson")
	ls := lines(t, r.body)
	var e ErrorBody
	if err := json.Unmarshal(ls[len(ls)-1]["error"], &e); r.status != 200 || err != nil || e.Code != chain.CodeWriterLost || e.Message == "" {
		t.Errorf("stream %d, last line %s (%v)", r.status, ls[len(ls)-1]["error"], err)
	}
	// Invalid identifiers and entries are the engine's verdicts, in its
	// order; a bad glob is the server's. None changes anything.
	for _, tc := range []struct {
		in   client.CaptureRequest
		code string
	}{
		{client.CaptureRequest{Writer: w, Dir: dir, ID: "a\x00b"}, chain.CodeInvalidID},
		{client.CaptureRequest{Writer: w, Dir: dir, ID: "\xed\xa0\x80"}, chain.CodeInvalidID},
		{client.CaptureRequest{Writer: w, Dir: dir, Includes: []string{"[x"}}, CodeBadRequest},
		{client.CaptureRequest{Writer: w, Dir: "ws"}, CodeBadRequest},
		{client.CaptureRequest{Writer: w, Dir: filepath.Join(dir, "missing")}, ""},
	} {
		_, err := u.c.Capture(ctx, tc.in)
		var ce *client.Error
		if !errors.As(err, &ce) || (tc.code != "" && ce.Code != tc.code) {
			t.Errorf("capture %+v: %v, want %s", tc.in, err, tc.code)
		}
		if h := head(t, db, "main"); h != "" {
			t.Fatalf("a refused capture made %q the head", h)
		}
	}
	// Members the Go client cannot send wrongly, and malformed bodies.
	for _, tc := range []struct{ body, code string }{
		{`{"writer": ` + mustJSON(t, w) + `, "dir": "` + dir + `", "createdAt": 1.5}`, chain.CodeInvalidEntry},
		{`{"writer": ` + mustJSON(t, w) + `, "dir": "` + dir + `", "id": 7}`, chain.CodeInvalidID},
		{`{"writer": {"threadId": ["main"]}, "dir": "` + dir + `"}`, chain.CodeInvalidID},
	} {
		if r := do(t, u.http, "POST", "http://sbxdb/v1/capture", tc.body); r.code(t) != tc.code {
			t.Errorf("capture %s: %d %s, want %s", tc.body, r.status, r.body, tc.code)
		}
		if h := head(t, db, "main"); h != "" {
			t.Fatalf("a refused capture made %q the head", h)
		}
	}
	for _, body := range []string{`{"writer": 1, "dir": 5}`, `{"excludes": "x"}`, `nope`} {
		if r := do(t, u.http, "POST", "http://sbxdb/v1/capture", body); r.status != 400 || r.code(t) != CodeBadRequest {
			t.Errorf("capture %s: %d %s", body, r.status, r.body)
		}
	}
}

// A capture whose client goes away is cancelled and appends nothing.
func TestCaptureCancelledWithTheRequest(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	dir := tree(t, 200, 1000)
	s := New(db, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	// The engine waits for its progress callback before it commits: the
	// hook holds the first report until the request's context has ended.
	s.hooks.progress = func(r *http.Request) {
		once.Do(func() {
			cancel()
			<-r.Context().Done()
		})
	}
	u := serveUnix(t, s)
	_, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, ID: "cp1", Progress: func(sbxdb.Progress) {}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("capture: %v, want context.Canceled", err)
	}
	u.stop()
	if err := <-u.served; err != nil {
		t.Fatal(err)
	}
	u.served <- nil // for the cleanup
	if h := head(t, db, "main"); h != "" {
		t.Fatalf("the cancelled capture appended %q", h)
	}
	if cp, err := db.Get(context.Background(), "cp1"); cp != nil || err != nil {
		t.Fatalf("the cancelled capture stored %v (%v)", cp, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// scrape returns the text of GET /metrics.
func scrape(t *testing.T, u *unixServer) string {
	t.Helper()
	r := do(t, u.http, "GET", "http://sbxdb/metrics", "")
	if r.status != 200 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	return string(r.body)
}

// A restore with paths restores those entries and the directories above
// them, on a unix socket and on TCP (below AllowDirs, into an existing
// empty directory, which is kept); a malformed path or one the checkpoint
// does not hold is INVALID_PATH and makes nothing.
func TestRestorePaths(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	allowed := t.TempDir()
	c, _ := tcp(t, New(db, Options{AllowDirs: []string{allowed}}), "")
	u := serveUnix(t, New(db, Options{}))
	ctx := context.Background()
	dir := tree(t, 14, 20) // d0…d6, two files each
	if _, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, ID: "cp1"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"d1", "d1/f0001.txt", "d1/f0008.txt", "d2", "d2/f0002.txt"}
	check := func(out string) {
		t.Helper()
		var got []string
		filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
			if rel, _ := filepath.Rel(out, p); err == nil && rel != "." {
				got = append(got, filepath.ToSlash(rel))
			}
			return nil
		})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("restored %v, want %v", got, want)
		}
	}
	paths := []string{"d1", "./d2//f0002.txt", "d1/f0008.txt"}
	out := filepath.Join(t.TempDir(), "out")
	st, err := u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: out, Paths: paths})
	if err != nil || st.Files != 3 {
		t.Fatalf("restore of %q: %+v, %v", paths, st, err)
	}
	check(out)
	into := filepath.Join(allowed, "home")
	if err := os.Mkdir(into, 0o711); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Lstat(into)
	if _, err := c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: into, Paths: paths}); err != nil {
		t.Fatal(err)
	}
	check(into)
	if after, _ := os.Lstat(into); !os.SameFile(before, after) || after.Mode() != before.Mode() {
		t.Errorf("restore on TCP replaced its empty target: %v, was %v", after.Mode(), before.Mode())
	}

	for _, p := range []string{"nope", "d1/f0001.txt/x", "../d1", "/d1", ""} {
		out := filepath.Join(t.TempDir(), "out")
		_, err := u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: out, Paths: []string{"d1", p}})
		wantCode(t, "restore of path "+strconv.Quote(p), err, chain.CodeInvalidPath, chain.ErrInvalidPath)
		if !strings.Contains(err.Error(), strconv.Quote(p)) {
			t.Errorf("error %q does not name the path %q", err, p)
		}
		if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a restore of path %q made %s (%v)", p, out, err)
		}
	}
	// On the wire: a path that is not UTF-8 arrives as it was (and is not
	// in the checkpoint); one that is not a string is a bad request.
	out = filepath.Join(t.TempDir(), "out")
	for body, code := range map[string]string{
		`{"checkpointId": "cp1", "dir": "` + out + `", "paths": [{"bytes": "ZDH/"}]}`: chain.CodeInvalidPath,
		`{"checkpointId": "cp1", "dir": "` + out + `", "paths": [1]}`:                 CodeBadRequest,
		`{"checkpointId": "cp1", "dir": "` + out + `", "paths": "d1"}`:                CodeBadRequest,
	} {
		r := do(t, u.http, "POST", "http://sbxdb/v1/restore", body)
		if r.status != http.StatusBadRequest || r.code(t) != code {
			t.Errorf("%s: %d %s, want 400 %s", body, r.status, r.body, code)
		}
		if code == chain.CodeInvalidPath && !strings.Contains(string(r.body), `d1\\xff`) {
			t.Errorf("%s: %s does not name the path", body, r.body)
		}
	}
	if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused restores made %s (%v)", out, err)
	}
}

// GCOptions.Recompress travels to the server: without it no pack is
// rewritten for its level, with it (dry or not) the cold ones are.
func TestGCRecompress(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	s := New(db, Options{})
	u := serveUnix(t, s)
	ctx := context.Background()
	if _, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: tree(t, 20, 100), ID: "cp1"}); err != nil {
		t.Fatal(err)
	}
	res, err := u.c.GC(ctx, sbxdb.GCOptions{Immediate: true})
	if err != nil || res.Repack.Recompressed != 0 {
		t.Fatalf("gc without recompress: %+v, %v", res, err)
	}
	plan, err := u.c.PlanGC(ctx, sbxdb.GCOptions{Immediate: true, Recompress: true})
	if err != nil || plan.Repack.Recompressed != 1 {
		t.Fatalf("dry gc with recompress: %+v, %v", plan, err)
	}
	res, err = u.c.GC(ctx, sbxdb.GCOptions{Immediate: true, Recompress: true})
	if err != nil || res.Repack.Recompressed != 1 {
		t.Fatalf("gc with recompress: %+v, %v", res, err)
	}
}
