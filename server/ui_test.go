package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// The UI's tests drive a real browser (Debian's chromium, headless) with
// chromedp against a real server over a real store, on 127.0.0.1 only.

// uiToken is the bearer token of the UI tests' TCP server.
const uiToken = "ui-test-token-0123456789abcdef0123456789abcdef"

// uiFixture is the store the UI tests browse: thread agent-main has 30
// checkpoints (cp-01 … cp-30, a minute apart, cp-10 named with a hostile
// label), a transcript that grows, and at cp-30 a changed text file
// (src/main.go), a changed binary (bin/tool), an added and a removed file
// and an artifact; thread agent-fork is a fork of cp-15.
type uiFixture struct {
	db   *engine.DB
	base int64 // cp-01's createdAt
}

// uiMainGo is src/main.go before cp-30 (changed reports whether at cp-30).
func uiMainGo(changed bool) string {
	greeting := "hello"
	if changed {
		greeting = "hello, world"
	}
	return "package main\n\nimport \"fmt\"\n\n// main greets.\nfunc main() {\n\tfmt.Println(\"" + greeting + "\")\n}\n"
}

func newUIFixture(t *testing.T) *uiFixture {
	t.Helper()
	ctx := context.Background()
	db := openDB(t)
	f := &uiFixture{db: db, base: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()}
	put := func(ns cas.Namespace, data []byte) string {
		b := db.Blobs().NewBatch()
		defer b.Close()
		res, err := b.Add(ctx, ns, data)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return res.Key
	}
	file := func(path string, data []byte, exec bool) chain.Entry {
		return chain.Entry{Path: path, Kind: chain.KindFile, BlobKey: put(cas.Files, data), Size: int64(len(data)), Executable: exec}
	}
	binary := func(last byte) []byte {
		b := make([]byte, 600)
		for i := range b {
			b[i] = byte(i * 7)
		}
		b[0], b[1], b[599] = 0x7f, 0, last
		return b
	}
	l, err := db.AcquireWriter(ctx, "agent-main")
	if err != nil {
		t.Fatal(err)
	}
	var convo []json.RawMessage
	msg := func(s string) { convo = append(convo, json.RawMessage(s)) }
	msg(`{"role":"user","content":"Make the program greet the world. <script>window.__xss=1</script>"}`)
	head := ""
	for i := 1; i <= 30; i++ {
		last := i == 30
		files := []chain.Entry{
			file("README.md", []byte(fmt.Sprintf("# demo\n\nstep %d\n", i)), false),
			file("bin/tool", binary(map[bool]byte{false: 1, true: 2}[last]), true),
			{Path: "empty", Kind: chain.KindDir},
			{Path: "link", Kind: chain.KindSymlink, Target: "src/main.go"},
			file("src/main.go", []byte(uiMainGo(last)), false),
			file("xss.html", []byte("<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">\n"), false),
		}
		if last {
			files = append(files, file("notes.txt", []byte("added at the end\n"), false))
		} else {
			files = append(files, file("old.txt", []byte("removed at the end\n"), false))
		}
		cp := &chain.Checkpoint{ID: fmt.Sprintf("cp-%02d", i), ThreadID: "agent-main", ParentID: head,
			CreatedAt: f.base + int64(i-1)*60_000, Reason: chain.ReasonAutomatic, Files: files}
		switch i {
		case 10:
			cp.Reason, cp.Label = chain.ReasonNamed, `<img src=x onerror="window.__xss=3">milestone`
		case 29:
			msg(`{"role":"assistant","content":[{"type":"text","text":"I will edit src/main.go."}],` +
				`"toolCalls":[{"id":"call-1","type":"function","function":{"name":"edit_file","arguments":"{\"path\":\"src/main.go\"}"}}]}`)
		case 30:
			msg(`{"role":"tool","toolCallId":"call-1","content":"edited src/main.go"}`)
			msg(`{"role":"assistant","content":"Done: it prints hello, world."}`)
			cp.Artifacts = []chain.Artifact{{ArtifactID: "report", Name: "report.html", MimeType: "text/html",
				BlobKey: put(cas.Artifacts, []byte("<h1>report</h1>")), Size: int64(len("<h1>report</h1>")), CreatedAt: cp.CreatedAt}}
		}
		cp.Conversation = append([]json.RawMessage(nil), convo...)
		if head, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
			t.Fatalf("append %s: %v", cp.ID, err)
		}
	}
	fl, err := db.AcquireWriter(ctx, "agent-fork")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Fork(ctx, chain.ForkInput{SourceThreadID: "agent-main", SourceCheckpointID: "cp-15",
		DestinationThreadID: "agent-fork", DestinationCheckpointID: "fork-root", CreatedAt: f.base + 15*60_000, Writer: fl.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := db.ReleaseWriter(ctx, fl.Writer); err != nil {
		t.Fatal(err)
	}
	return f
}

// chromiumPath finds the browser, or skips the test (fails it when CI is
// set: CI must run the browser tests).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH, and CI is set: apt-get install -y chromium")
	}
	t.Skip("skipping the browser test: no chromium on PATH (apt-get install -y chromium)")
	return ""
}

// browser starts a headless chromium for the test and returns its context,
// bounded by a generous timeout: the test fails rather than hangs.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		// Nothing but the test's servers on 127.0.0.1.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-background-networking", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	if err := chromedp.Do(ctx); err != nil { // start the browser
		t.Fatal(err)
	}
	return ctx
}

// uiServer serves db on 127.0.0.1 with uiToken and returns the base URL.
func uiServer(t *testing.T, db *engine.DB) string {
	t.Helper()
	ts := httptest.NewServer(New(db, Options{Token: uiToken}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// bdo runs the browser steps, failing the test on an error.
func bdo(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// get runs a, failing the test on an error, and returns its value.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// btext is the rendered text of the first element sel matches.
func btext(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, chromedp.Text(chromedp.CSS(sel)))
}

// bcount is the number of elements sel matches.
func bcount(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
}

// shot saves a full-page screenshot of the page the browser shows as
// name.png in the test's artifact directory (kept with go test -artifacts).
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := get(t, ctx, chromedp.FullScreenshot(100))
	p := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

// login opens the UI at path, which sends the browser to the login page,
// and logs in with the token.
func login(t *testing.T, ctx context.Context, base, path string) {
	t.Helper()
	bdo(t, ctx, chromedp.Navigate(base+path),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), uiToken),
		chromedp.Submit(chromedp.CSS(`#token`)))
}

// noXSS fails when a hostile string of the fixture ran as script.
func noXSS(t *testing.T, ctx context.Context) {
	t.Helper()
	if get(t, ctx, chromedp.Evaluate[bool](`window.__xss !== undefined`)) {
		t.Fatal("a stored string ran as script")
	}
}

func TestUIThreads(t *testing.T) {
	f := newUIFixture(t)
	base := uiServer(t, f.db)
	ctx := browser(t)
	login(t, ctx, base, "/ui/")
	bdo(t, ctx, chromedp.WaitVisible(chromedp.CSS(`table.threads`)))
	shot(t, ctx, "threads")
	title := get(t, ctx, chromedp.Title())
	n, rows := btext(t, ctx, `#thread-count`), btext(t, ctx, `table.threads tbody`)
	if !strings.HasPrefix(title, "Threads") || !strings.Contains(n, "2 threads") {
		t.Fatalf("title %q, count %q", title, n)
	}
	if !strings.Contains(rows, "agent-main\t30") || !strings.Contains(rows, "agent-fork\t1") || !strings.Contains(rows, "2026-03-01 12:29:00Z") {
		t.Fatalf("rows:\n%s", rows)
	}
	if lease := btext(t, ctx, `table.threads tbody tr:nth-child(2) td:nth-child(4)`); !strings.Contains(lease, "live") {
		t.Fatalf("agent-main's lease: %q", lease)
	}
	// Search narrows the list, case-insensitively.
	bdo(t, ctx, chromedp.SetValue(chromedp.CSS(`#q`), "FORK"), chromedp.Submit(chromedp.CSS(`#q`)),
		chromedp.WaitVisible(`//p[@id="thread-count"][contains(., "1 of 2")]`))
	if rows := btext(t, ctx, `table.threads tbody`); strings.Contains(rows, "agent-main") || !strings.Contains(rows, "agent-fork") {
		t.Fatalf("search FORK shows:\n%s", rows)
	}
	noXSS(t, ctx)
}

func TestUIGraph(t *testing.T) {
	f := newUIFixture(t)
	base := uiServer(t, f.db)
	ctx := browser(t)
	login(t, ctx, base, "/ui/thread?id=agent-main")
	bdo(t, ctx, chromedp.WaitVisible(chromedp.CSS(`svg#history`)))
	shot(t, ctx, "thread-graph")
	// 30 checkpoints and the fork root of agent-fork it was copied to.
	if n := bcount(t, ctx, `svg#history a.node`); n != 31 {
		t.Fatalf("%d nodes, want 31", n)
	}
	if n := bcount(t, ctx, `svg#history a.node.cp`); n != 30 {
		t.Fatalf("%d checkpoint nodes, want 30", n)
	}
	if n := bcount(t, ctx, `svg#history path.edge.fork.fork-out`); n != 1 {
		t.Fatalf("%d fork edges out, want 1", n)
	}
	if n := bcount(t, ctx, `svg#history path.edge:not(.fork)`); n != 29 {
		t.Fatalf("%d parent edges, want 29", n)
	}
	if head := get(t, ctx, chromedp.AttributeValue(chromedp.CSS(`svg#history a.node.head`), "aria-label")); !strings.Contains(head.Value, "cp-30") {
		t.Fatalf("the head node is %q", head.Value)
	}
	if forks := btext(t, ctx, `ul.forks`); !strings.Contains(forks, "cp-15 forked to agent-fork as fork-root") {
		t.Fatalf("forks: %q", forks)
	}
	// The label is text, not markup.
	if n := bcount(t, ctx, `svg#history img`); n != 0 {
		t.Fatal("a label became an element")
	}
	noXSS(t, ctx)
	// The fork's own graph draws the fork in from agent-main.
	bdo(t, ctx, chromedp.Navigate(base+"/ui/thread?id=agent-fork"), chromedp.WaitVisible(chromedp.CSS(`svg#history`)))
	if n := bcount(t, ctx, `svg#history path.edge.fork.fork-in`); n != 1 {
		t.Fatalf("%d fork edges in, want 1", n)
	}
	if forks := btext(t, ctx, `ul.forks`); !strings.Contains(forks, "Forked from cp-15 of agent-main as fork-root") {
		t.Fatalf("forks: %q", forks)
	}
}

func TestUICheckpoint(t *testing.T) {
	f := newUIFixture(t)
	base := uiServer(t, f.db)
	ctx := browser(t)
	login(t, ctx, base, "/ui/checkpoint?id=cp-30")
	bdo(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#metadata`)))
	shot(t, ctx, "checkpoint")
	if meta := btext(t, ctx, `#metadata`); !strings.Contains(meta, "cp-29") || !strings.Contains(meta, "2026-03-01 12:29:00Z") || !strings.Contains(meta, "automatic") {
		t.Fatalf("metadata: %q", meta)
	}
	tree := btext(t, ctx, `table.tree tbody`)
	for _, want := range []string{"bin/", "empty/\tdrwxr-xr-x\tempty", "src/\tdrwxr-xr-x\t1 files", "link\tlrwxrwxrwx\t\t→ src/main.go", "notes.txt\t-rw-r--r--\t17 B", "xss.html"} {
		if !strings.Contains(tree, want) {
			t.Fatalf("the tree lacks %q:\n%s", want, tree)
		}
	}
	if arts := btext(t, ctx, `table.artifacts`); !strings.Contains(arts, "report.html\ttext/html\t15 B") {
		t.Fatalf("artifacts: %q", arts)
	}
	tr := btext(t, ctx, `ol.transcript`)
	for _, want := range []string{"User", "<script>window.__xss=1</script>", "I will edit src/main.go.", "Tool call: edit_file", `"path": "src/main.go"`, "Tool result: call-1", "Done: it prints hello, world."} {
		if !strings.Contains(tr, want) {
			t.Fatalf("the transcript lacks %q:\n%s", want, tr)
		}
	}
	noXSS(t, ctx)
	// Into src/, then main.go: the viewer numbers the lines.
	bdo(t, ctx, chromedp.Click(`//table[contains(@class,"tree")]//a[.="src/"]`),
		chromedp.WaitVisible(`//table[contains(@class,"tree")]//a[.="main.go"]`),
		chromedp.Click(`//table[contains(@class,"tree")]//a[.="main.go"]`),
		chromedp.WaitVisible(chromedp.CSS(`table#content`)))
	shot(t, ctx, "file-text")
	if line := btext(t, ctx, `table#content tr#L7`); line != "7\t\tfmt.Println(\"hello, world\")" {
		t.Fatalf("line 7: %q", line)
	}
	if n := bcount(t, ctx, `table#content tr`); n != 8 {
		t.Fatalf("%d lines, want 8", n)
	}
	// A hostile HTML file is shown as text.
	bdo(t, ctx, chromedp.Navigate(base+"/ui/file?cp=cp-30&path=xss.html"), chromedp.WaitVisible(chromedp.CSS(`table#content`)))
	if line := btext(t, ctx, `table#content tr#L1`); !strings.Contains(line, "<script>window.__xss=1</script>") {
		t.Fatalf("xss.html line 1: %q", line)
	}
	noXSS(t, ctx)
	// A binary file is offered for download; a symlink shows its target.
	bdo(t, ctx, chromedp.Navigate(base+"/ui/file?cp=cp-30&path=bin/tool"), chromedp.WaitVisible(chromedp.CSS(`#binary`)))
	shot(t, ctx, "file-binary")
	if href := get(t, ctx, chromedp.AttributeValue(chromedp.CSS(`#download`), "href")); href.Value != "/ui/raw?cp=cp-30&path=bin%2ftool" {
		t.Fatalf("download link %q", href.Value)
	}
	bdo(t, ctx, chromedp.Navigate(base+"/ui/file?cp=cp-30&path=link"), chromedp.WaitVisible(chromedp.CSS(`#symlink`)))
	if s := btext(t, ctx, `#symlink`); !strings.Contains(s, "src/main.go") {
		t.Fatalf("symlink: %q", s)
	}
}

// TestUIUnixRaw reads the UI on a unix socket, trusted without a token,
// and a file's bytes whole and by range.
func TestUIUnixRaw(t *testing.T) {
	f := newUIFixture(t)
	u := serveUnix(t, New(f.db, Options{Token: uiToken}))
	get := func(path, rng string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://sbxdb"+path, nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := u.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if code, _, body := get("/ui/", ""); code != 200 || !strings.Contains(body, "agent-main") {
		t.Fatalf("GET /ui/ on the socket: %d\n%s", code, body)
	}
	code, h, body := get("/ui/raw?cp=cp-30&path=src/main.go", "")
	if code != 200 || body != uiMainGo(true) || h.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(h.Get("Content-Disposition"), "attachment") {
		t.Fatalf("raw: %d %v %q", code, h, body)
	}
	if code, h, body := get("/ui/raw?cp=cp-30&path=src/main.go", "bytes=8-11"); code != 206 || body != "main" || h.Get("Content-Range") != fmt.Sprintf("bytes 8-11/%d", len(uiMainGo(true))) {
		t.Fatalf("range 8-11: %d %q %q", code, h.Get("Content-Range"), body)
	}
	if code, _, body := get("/ui/raw?cp=cp-30&path=src/main.go", "bytes=-2"); code != 206 || body != "}\n" {
		t.Fatalf("range -2: %d %q", code, body)
	}
	if code, _, _ := get("/ui/raw?cp=cp-30&path=src/main.go", "bytes=999-"); code != 416 {
		t.Fatalf("range past the end: %d", code)
	}
	if code, h, body := get("/ui/artifact?cp=cp-30&id=report", ""); code != 200 || body != "<h1>report</h1>" || h.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("artifact: %d %v %q", code, h, body)
	}
}

// TestUIClickThrough goes from the thread list to a thread, a checkpoint
// and its diff with its parent, by clicking, as a user does.
func TestUIClickThrough(t *testing.T) {
	f := newUIFixture(t)
	base := uiServer(t, f.db)
	ctx := browser(t)
	login(t, ctx, base, "/ui/")
	bdo(t, ctx, chromedp.WaitVisible(chromedp.CSS(`table.threads`)),
		chromedp.Click(`//a[@class="thread-link"][.="agent-main"]`),
		chromedp.WaitVisible(chromedp.CSS(`svg#history`)),
		chromedp.Click(chromedp.CSS(`svg#history a.node.head`)),
		chromedp.WaitVisible(`//h1[.="Checkpoint cp-30"]`),
		chromedp.Click(chromedp.CSS(`#diff-parent`)),
		chromedp.WaitVisible(chromedp.CSS(`#changes`)))
	shot(t, ctx, "diff")
	if h := btext(t, ctx, `h1`); h != "Diff cp-29 → cp-30" {
		t.Fatalf("heading %q", h)
	}
	changes := btext(t, ctx, `#changes`)
	for _, want := range []string{"README.md changed", "bin/tool changed", "notes.txt added", "old.txt removed", "src/main.go changed"} {
		if !strings.Contains(changes, want) {
			t.Fatalf("changes lack %q:\n%s", want, changes)
		}
	}
	if strings.Contains(changes, "xss.html") {
		t.Fatalf("an unchanged file is listed:\n%s", changes)
	}
	main := `section[id="changed-src/main.go"]`
	del, add := btext(t, ctx, main+` tr.del`), btext(t, ctx, main+` tr.add`)
	if del != "7\t\t-\tfmt.Println(\"hello\")" || add != "\t7\t+\tfmt.Println(\"hello, world\")" {
		t.Fatalf("src/main.go's diff: del %q, add %q", del, add)
	}
	if n := bcount(t, ctx, main+` tr.ctx`); n != 4 { // 3 lines of context before, 1 after (the file's last)
		t.Fatalf("%d context lines", n)
	}
	if note := btext(t, ctx, `section[id="changed-bin/tool"] .note`); !strings.Contains(note, "binary files differ") {
		t.Fatalf("bin/tool: %q", note)
	}
	// Any two: the form compares cp-01 with cp-30.
	bdo(t, ctx, chromedp.SetValue(chromedp.CSS(`#a`), "cp-01"), chromedp.Submit(chromedp.CSS(`#b`)),
		chromedp.WaitVisible(`//h1[.="Diff cp-01 → cp-30"]`))
	if add := btext(t, ctx, `section[id="changed-README.md"] tr.add`); !strings.Contains(add, "step 30") {
		t.Fatalf("README.md cp-01 → cp-30: %q", add)
	}
}

func TestUIStorage(t *testing.T) {
	f := newUIFixture(t)
	base := uiServer(t, f.db)
	ctx := browser(t)
	login(t, ctx, base, "/ui/storage")
	bdo(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#figures`)))
	uiChartMatches(t, ctx, f.db)
	if n := bcount(t, ctx, `#gc-runs-none`); n != 1 {
		t.Fatal("before any run the page does not say that none ran")
	}
	figures := btext(t, ctx, `#figures`)
	for _, want := range []string{"Threads\t2", "Checkpoints\t31", "Packs\t", "Dead bytes in packs\t", "Dedup ratio"} {
		if !strings.Contains(figures, want) {
			t.Fatalf("figures lack %q:\n%s", want, figures)
		}
	}
	// 31 checkpoints name mostly the same blobs.
	var dedup float64
	if _, err := fmt.Sscanf(btext(t, ctx, `#dedup`), "%f", &dedup); err != nil || dedup < 5 {
		t.Fatalf("dedup %q", btext(t, ctx, `#dedup`))
	}
	// agent-main's writer lease is live (retention skips it); agent-gc
	// has 8 checkpoints, each naming a blob of its own, and no writer.
	uiGCThread(t, f.db, "agent-gc", 8)
	bdo(t, ctx, chromedp.SetValue(chromedp.CSS(`#keep`), "5"), chromedp.SetValue(chromedp.CSS(`#olderThan`), "0"),
		chromedp.Click(chromedp.CSS(`#gc-dry-run`)), chromedp.WaitVisible(chromedp.CSS(`#plan`)))
	shot(t, ctx, "storage-gc-plan")
	if plan := btext(t, ctx, `#plan`); !strings.Contains(plan, "retention") || !strings.Contains(plan, "sweep") || !strings.Contains(plan, "agent-fork") && !strings.Contains(plan, "agent-main") {
		t.Fatalf("plan:\n%s", plan)
	}
	// A dry run: nothing was deleted.
	if s, err := f.db.ThreadSummary(context.Background(), "agent-main"); err != nil || s.Checkpoints != 30 {
		t.Fatalf("after the dry run agent-main has %d checkpoints (%v)", s.Checkpoints, err)
	}
	// The dry run is the first of the last runs: 3 of agent-gc's 8
	// checkpoints would go.
	if runs := uiRuns(t, ctx); len(runs) != 1 || runs[0] != [5]string{"gc", "yes (would be)", "ok", runs[0][3], "3"} {
		t.Fatalf("runs after the dry run: %q", runs)
	}
	// A bad window is the form's error, not a run.
	bdo(t, ctx, chromedp.SetValue(chromedp.CSS(`#olderThan`), "soon"), chromedp.Click(chromedp.CSS(`#gc-dry-run`)),
		chromedp.WaitVisible(chromedp.CSS(`#plan-error`)))
	if n := bcount(t, ctx, `#gc-runs tr.run`); n != 1 {
		t.Fatalf("%d runs after a refused form, want 1", n)
	}

	// A sweep and a gc through the API, for real: the page lists them,
	// newest first, with what they freed and deleted.
	api := func(path, body string, out any) {
		t.Helper()
		r, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+uiToken)
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || json.Unmarshal(b, out) != nil {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
	}
	var sw sbxdb.SweepResult
	api("/v1/sweep", `{"immediate":true}`, &sw)
	var res sbxdb.GCResult
	api("/v1/gc", `{"retain":true,"keep":5,"immediate":true}`, &res)
	freed := res.Sweep.Bytes + max(0, res.Repack.Before-res.Repack.After)
	if freed == 0 {
		t.Fatalf("the gc freed nothing: %+v", res)
	}
	bdo(t, ctx, chromedp.Navigate(base+"/ui/storage"), chromedp.WaitVisible(chromedp.CSS(`#gc-runs`)))
	runs := uiRuns(t, ctx)
	if len(runs) != 3 || runs[0] != [5]string{"gc", "no", "ok", fmt.Sprint(freed), "3"} ||
		runs[1] != [5]string{"sweep", "no", "ok", fmt.Sprint(sw.Bytes), "0"} || runs[2][0] != "gc" || runs[2][1] != "yes (would be)" {
		t.Fatalf("runs after a sweep and a gc (freed %d, swept %d):\n%q", freed, sw.Bytes, runs)
	}
	uiChartMatches(t, ctx, f.db)
}

// uiGCThread appends n checkpoints to thread, each naming a blob of its
// own, and releases its writer.
func uiGCThread(t *testing.T, db *engine.DB, thread string, n int) {
	t.Helper()
	ctx := context.Background()
	l, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	head := ""
	for i := 1; i <= n; i++ {
		data := []byte(fmt.Sprintf("%s step %d: %s\n", thread, i, strings.Repeat("x", 4000+i)))
		b := db.Blobs().NewBatch()
		res, err := b.Add(ctx, cas.Files, data)
		if err == nil {
			err = b.Commit(ctx)
		}
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		cp := &chain.Checkpoint{ID: fmt.Sprintf("%s-%02d", thread, i), ThreadID: thread, ParentID: head, CreatedAt: time.Now().UnixMilli(),
			Reason: chain.ReasonAutomatic, Files: []chain.Entry{{Path: "step.txt", Kind: chain.KindFile, BlobKey: res.Key, Size: int64(len(data))}}}
		if head, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.ReleaseWriter(ctx, l.Writer); err != nil {
		t.Fatal(err)
	}
}

// uiRuns is the storage page's list of the last gc runs: kind, dry run,
// outcome, bytes freed (exact) and checkpoints deleted of each row.
func uiRuns(t *testing.T, ctx context.Context) [][5]string {
	t.Helper()
	var rows [][5]string
	js := `[...document.querySelectorAll('#gc-runs tr.run')].map(r => [r.querySelector('.kind').textContent, ` +
		`r.querySelector('.dry').textContent, r.querySelector('.outcome').textContent, ` +
		`r.querySelector('.freed').dataset.bytes, r.querySelector('.deleted').textContent])`
	for _, r := range get(t, ctx, chromedp.Evaluate[[][]string](js)) {
		rows = append(rows, [5]string(r))
	}
	return rows
}

// uiChartMatches checks the storage page's chart: one bar per upload day
// of the blobs stored, each the stored bytes of that day's blobs.
func uiChartMatches(t *testing.T, ctx context.Context, db *engine.DB) {
	t.Helper()
	infos, err := db.Blobs().List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	sum := map[string]int64{}
	for _, in := range infos {
		sum[in.Uploaded.UTC().Format(time.DateOnly)] += in.Stored
	}
	for d, n := range sum {
		want[d] = fmt.Sprint(n)
	}
	got := get(t, ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll('#stored-by-day .bar')].map(b => [b.dataset.day, b.dataset.bytes]))`))
	if len(got) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("chart bars %v, want %v", got, want)
	}
	if h := get(t, ctx, chromedp.Evaluate[int](`document.querySelector('#stored-by-day .bar rect').getBoundingClientRect().height`)); h <= 0 {
		t.Fatalf("the tallest bar is drawn %d px high", h)
	}
}

// TestUIAuth: on TCP, nothing of the UI is reachable without the token,
// a session does not open the API, and a forged cross-site POST is
// refused.
func TestUIAuth(t *testing.T) {
	f := newUIFixture(t)
	base := uiServer(t, f.db)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	status := func(req *http.Request) (int, http.Header, string) {
		t.Helper()
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	req := func(method, path, body string, header ...string) *http.Request {
		r, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	// Without the token: every page sends to the login page, downloads
	// and posts are 401, and so is the API.
	for _, p := range []string{"/ui/", "/ui/thread?id=agent-main", "/ui/checkpoint?id=cp-30", "/ui/raw?cp=cp-30&path=src/main.go", "/ui/storage"} {
		if code, h, _ := status(req("GET", p, "")); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/login?next=") {
			t.Fatalf("GET %s without the token: %d %s", p, code, h.Get("Location"))
		}
	}
	if code, _, _ := status(req("POST", "/ui/storage/gc", "olderThan=0")); code != http.StatusUnauthorized {
		t.Fatalf("POST /ui/storage/gc without the token: %d", code)
	}
	if code, _, _ := status(req("GET", "/v1/stats", "")); code != http.StatusUnauthorized {
		t.Fatalf("GET /v1/stats without the token: %d", code)
	}
	if code, _, body := status(req("GET", "/ui/login", "")); code != 200 || !strings.Contains(body, `id="token"`) {
		t.Fatalf("GET /ui/login: %d", code)
	}
	// The bearer token opens the UI as it opens the API.
	if code, _, body := status(req("GET", "/ui/", "", "Authorization", "Bearer "+uiToken)); code != 200 || !strings.Contains(body, "agent-main") {
		t.Fatalf("GET /ui/ with the bearer token: %d", code)
	}
	// A wrong token is refused; the right one gives the session cookie.
	if code, h, _ := status(req("POST", "/ui/login", "token=wrong&next=/ui/")); code != http.StatusUnauthorized || h.Get("Set-Cookie") != "" {
		t.Fatalf("login with a wrong token: %d, cookie %q", code, h.Get("Set-Cookie"))
	}
	code, h, _ := status(req("POST", "/ui/login", "token="+uiToken+"&next=/ui/storage"))
	for code == http.StatusUnauthorized { // still backing off after the wrong token: retry after it
		time.Sleep(200 * time.Millisecond)
		code, h, _ = status(req("POST", "/ui/login", "token="+uiToken+"&next=/ui/storage"))
	}
	cookie := h.Get("Set-Cookie")
	if code != http.StatusSeeOther || h.Get("Location") != "/ui/storage" || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("login: %d %q, cookie %q", code, h.Get("Location"), cookie)
	}
	session, _, _ := strings.Cut(cookie, ";")
	// The session opens the UI, not the API.
	code, _, page := status(req("GET", "/ui/storage", "", "Cookie", session))
	if code != 200 {
		t.Fatalf("GET /ui/storage with the session: %d", code)
	}
	if code, _, _ := status(req("GET", "/v1/stats", "", "Cookie", session)); code != http.StatusUnauthorized {
		t.Fatalf("GET /v1/stats with a UI session: %d", code)
	}
	// A post needs the page's CSRF token.
	if code, _, _ := status(req("POST", "/ui/storage/gc", "olderThan=0", "Cookie", session)); code != http.StatusForbidden {
		t.Fatalf("POST without the CSRF token: %d", code)
	}
	_, rest, _ := strings.Cut(page, `name="csrf" value="`)
	csrf, _, _ := strings.Cut(rest, `"`)
	if code, _, body := status(req("POST", "/ui/storage/gc", "olderThan=0&csrf="+csrf, "Cookie", session)); code != 200 || !strings.Contains(body, `id="plan"`) {
		t.Fatalf("POST with the CSRF token: %d", code)
	}
	// Even with the token, a post the browser marks cross-site is refused.
	if code, _, _ := status(req("POST", "/ui/storage/gc", "olderThan=0&csrf="+csrf, "Cookie", session, "Sec-Fetch-Site", "cross-site")); code != http.StatusForbidden {
		t.Fatalf("a cross-site POST with the CSRF token: %d", code)
	}

	// In the browser: the login page, then a forged form on another
	// origin (127.0.0.1, another port: the same site, so the cookie goes)
	// posting to the UI.
	ctx := browser(t)
	bdo(t, ctx, chromedp.Navigate(base+"/ui/checkpoint?id=cp-30"), chromedp.WaitVisible(chromedp.CSS(`#token`)))
	shot(t, ctx, "login")
	bdo(t, ctx, chromedp.SendKeys(chromedp.CSS(`#token`), uiToken), chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(`//h1[.="Checkpoint cp-30"]`))
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/ui/logout"><input name="csrf" value="guess"></form>
<script>document.getElementById("f").submit()</script>`, base)
	}))
	defer evil.Close()
	bdo(t, ctx, chromedp.Navigate(evil.URL), chromedp.WaitVisible(`//p[contains(@class,"error")][contains(., "cross-origin")]`))
	shot(t, ctx, "forged-post-refused")
	// Still logged in.
	bdo(t, ctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`table.threads`)))
}

// TestUIPhone: at phone width the pages fit the screen (wide content
// scrolls in its own box) and keep their navigation.
func TestUIPhone(t *testing.T) {
	f := newUIFixture(t)
	base := uiServer(t, f.db)
	ctx := browser(t)
	login(t, ctx, base, "/ui/")
	bdo(t, ctx, chromedp.WaitVisible(chromedp.CSS(`table.threads`)), chromedp.EmulateViewport(390, 844))
	for _, p := range []struct{ name, path, sel string }{
		{"phone-threads", "/ui/", `table.threads`},
		{"phone-thread", "/ui/thread?id=agent-main", `svg#history`},
		{"phone-checkpoint", "/ui/checkpoint?id=cp-30", `#metadata`},
		{"phone-diff", "/ui/diff?b=cp-30", `#changes`},
		{"phone-storage", "/ui/storage", `#figures`},
	} {
		bdo(t, ctx, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS(p.sel)))
		shot(t, ctx, p.name)
		if w := get(t, ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 390 {
			t.Errorf("%s is %d px wide at 390 px", p.path, w)
		}
		if n := bcount(t, ctx, `nav[aria-label="Main"] a`); n != 2 {
			t.Errorf("%s: %d main links", p.path, n)
		}
	}
}
