package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/server"
)

// fixture is a store with one thread "t" holding a lease, a root
// checkpoint "c1" and a transcript, and an instance record, served over
// TCP by a server with opts.
type fixture struct {
	t  *testing.T
	db *engine.DB
	ts *httptest.Server
	w  lease.Writer // the lease of "t"
}

func newFixture(t *testing.T, opts server.Options) *fixture {
	t.Helper()
	db, err := engine.Open(t.TempDir(), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", CreatedAt: 1, Reason: chain.ReasonAutomatic,
		Files:        []chain.Entry{{Path: "a.txt", Kind: chain.KindFile, BlobKey: testkit.FileKey(1), Size: 1}},
		Conversation: []json.RawMessage{json.RawMessage(` {"a" : 1} `)}}
	if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveThread(ctx, "t", []json.RawMessage{json.RawMessage(`{"m": [1,  2]}`)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Instances().Upsert(ctx, sbxdb.InstanceRecord{Key: "k", Provider: "p", ThreadID: "t", UpdatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	srv := server.New(db, opts)
	ts := httptest.NewUnstartedServer(srv)
	ts.Config.ConnContext = srv.ConnContext
	ts.Start()
	t.Cleanup(ts.Close)
	return &fixture{t: t, db: db, ts: ts, w: l.Writer}
}

// snapshot is everything a refused request must leave as it was.
type snapshot struct {
	Threads     []string
	Heads       map[string]string
	Lists       map[string][]*chain.Checkpoint
	Transcripts map[string][]string
	Refs        []chain.BlobRef
	Leases      map[string]lease.State
	Instance    *sbxdb.InstanceRecord
}

func (f *fixture) snapshot() snapshot {
	f.t.Helper()
	ctx := context.Background()
	s := snapshot{Heads: map[string]string{}, Lists: map[string][]*chain.Checkpoint{}, Transcripts: map[string][]string{}}
	var err error
	must := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	s.Threads, err = f.db.Threads(ctx)
	for _, th := range append([]string{"t", "u", "v"}, s.Threads...) {
		h, e := f.db.Head(ctx, th)
		must(e)
		l, e := f.db.List(ctx, th)
		must(e)
		m, e := f.db.LoadThread(ctx, th)
		must(e)
		s.Heads[th], s.Lists[th] = h, l
		for _, msg := range m {
			s.Transcripts[th] = append(s.Transcripts[th], string(msg))
		}
	}
	s.Refs, _ = f.db.BlobReferences(ctx)
	s.Leases, _ = f.db.Writers(ctx)
	s.Instance, _ = f.db.Instances().Get(ctx, "k")
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// do sends body to path with method and returns the status, the decoded
// error body (if any) and the response.
func (f *fixture) do(method, path, body string) (*http.Response, server.ErrorBody, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.ts.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	var eb server.ErrorBody
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(b, &eb); err != nil {
			f.t.Fatalf("%s %s: status %d with a body that is not an ErrorBody: %q", method, path, resp.StatusCode, b)
		}
	}
	return resp, eb, b
}

// refused sends the request, which must fail with status and code and
// change nothing.
func (f *fixture) refused(what, method, path, body string, status int, code string) *http.Response {
	f.t.Helper()
	before := f.snapshot()
	resp, eb, _ := f.do(method, path, body)
	if resp.StatusCode != status || eb.Code != code {
		f.t.Errorf("%s: %s %s %.200s: %d %s (%s), want %d %s", what, method, path, body, resp.StatusCode, eb.Code, eb.Message, status, code)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		f.t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	if d := cmp.Diff(before, f.snapshot()); d != "" {
		f.t.Errorf("%s: the store changed (-before +after):\n%s", what, d)
	}
	return resp
}

// writer renders the fixture's writer with its fence as the raw text fence.
func (f *fixture) writer(fence string) string {
	return fmt.Sprintf(`{"threadId":"t","ownerToken":%q,"fence":%s}`, f.w.OwnerToken, fence)
}

// appendBody is an append of c2 on c1 to "t" with the fixture's writer;
// edits replace raw members of the checkpoint.
func (f *fixture) appendBody(id, createdAt, fence string) string {
	return fmt.Sprintf(`{"checkpoint":{"id":%s,"threadId":"t","parentCheckpointId":"c1","createdAt":%s,"reason":"automatic",`+
		`"files":[],"conversation":[],"artifacts":[]},"expectedHeadId":"c1","writer":%s}`, id, createdAt, f.writer(fence))
}

// contractPOSTs are the contract's POST routes, and the operator's beside
// them (threads.go).
var contractPOSTs = []string{
	"/v1/checkpoints/get", "/v1/checkpoints/list", "/v1/checkpoints/head", "/v1/checkpoints/append",
	"/v1/checkpoints/delete-head", "/v1/checkpoints/delete", "/v1/checkpoints/fork",
	"/v1/leases/acquire", "/v1/leases/renew", "/v1/leases/release", "/v1/leases/unlock",
	"/v1/transcripts/load", "/v1/transcripts/save",
	"/v1/instances/get", "/v1/instances/upsert", "/v1/instances/delete",
	"/v1/checkpoints/resolve", "/v1/threads/summary", "/v1/threads/delete",
}

func TestBodiesThatAreNotJSONObjects(t *testing.T) {
	f := newFixture(t, server.Options{MaxJSONBytes: 1 << 10})
	big := `{"id":"` + strings.Repeat("x", 2<<10) + `"}`
	for _, path := range contractPOSTs {
		for what, body := range map[string]string{
			"malformed JSON": `{"threadId":"t",`, "not JSON": `threadId=t`, "empty body": ``,
			"an array": `["t"]`, "a string": `"t"`, "null": `null`, "a number": `7`,
			"two objects": `{} {}`, "trailing text": `{"threadId":"t"} x`, "a bad escape": `{"threadId":"\x"}`,
			"an append with a bad escape": f.appendBody(`"c\x"`, "1", "1"),
		} {
			f.refused(what, http.MethodPost, path, body, http.StatusBadRequest, server.CodeBadRequest)
		}
		f.refused("over the limit", http.MethodPost, path, big, http.StatusRequestEntityTooLarge, server.CodeTooLarge)
	}
}

func TestUnknownRouteAndWrongMethod(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.refused("unknown route", http.MethodPost, "/v1/checkpoints/nope", `{}`, http.StatusNotFound, server.CodeNotFound)
	f.refused("unknown version", http.MethodGet, "/v2/threads", ``, http.StatusNotFound, server.CodeNotFound)
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/checkpoints/get", "POST"},
		{http.MethodPut, "/v1/checkpoints/append", "POST"},
		{http.MethodDelete, "/v1/leases/release", "POST"},
		{http.MethodPost, "/v1/threads", "GET, HEAD"},
		{http.MethodPost, "/v1/leases", "GET, HEAD"},
	} {
		resp := f.refused("wrong method", c.method, c.path, `{"id":"c1"}`, http.StatusMethodNotAllowed, server.CodeMethodNotAllowed)
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

func TestIdentifiersRefusedAsTheEngineRefusesThem(t *testing.T) {
	f := newFixture(t, server.Options{})
	w := f.writer(fmt.Sprint(f.w.Fence))
	for _, bad := range []string{`"\ud800"`, `"\udc00x"`, `7`, `null`, `{}`, `""`, `"a\u0000b"`} {
		for _, c := range []struct{ path, body string }{
			{"/v1/checkpoints/get", `{"id":` + bad + `}`},
			{"/v1/checkpoints/list", `{"threadId":` + bad + `}`},
			{"/v1/checkpoints/head", `{"threadId":` + bad + `}`},
			{"/v1/checkpoints/append", f.appendBody(bad, "2", fmt.Sprint(f.w.Fence))},
			// The id comes before content: createdAt 1.5 is not reached.
			{"/v1/checkpoints/append", f.appendBody(bad, "1.5", fmt.Sprint(f.w.Fence))},
			{"/v1/checkpoints/delete-head", `{"threadId":` + bad + `,"checkpointId":"c1","writer":` + w + `}`},
			{"/v1/checkpoints/delete-head", `{"threadId":"t","checkpointId":` + bad + `,"writer":` + w + `}`},
			{"/v1/checkpoints/delete", `{"threadId":` + bad + `,"keep":1.5,"writer":` + w + `}`},
			{"/v1/checkpoints/fork", `{"sourceThreadId":` + bad + `,"sourceCheckpointId":"c1","destinationThreadId":"u","destinationCheckpointId":"d1","createdAt":1.5,"writer":` + w + `}`},
			{"/v1/checkpoints/fork", `{"sourceThreadId":"t","sourceCheckpointId":"c1","destinationThreadId":"u","destinationCheckpointId":` + bad + `,"createdAt":1,"writer":` + w + `}`},
			{"/v1/leases/acquire", `{"threadId":` + bad + `}`},
			{"/v1/leases/acquire", `{"threadId":` + bad + `,"takeOverDead":"yes"}`},
			{"/v1/leases/unlock", `{"threadId":` + bad + `}`},
			{"/v1/transcripts/load", `{"threadId":` + bad + `}`},
			{"/v1/transcripts/save", `{"threadId":` + bad + `,"messages":[1]}`},
			{"/v1/transcripts/save", `{"threadId":` + bad + `,"messages":"not an array"}`},
		} {
			f.refused("id "+bad, http.MethodPost, c.path, c.body, http.StatusBadRequest, chain.CodeInvalidID)
		}
	}
	// A writer whose thread id is not text is INVALID_ID too.
	for _, path := range []string{"/v1/checkpoints/delete-head", "/v1/checkpoints/delete"} {
		f.refused("writer thread \\ud800", http.MethodPost, path,
			`{"threadId":"t","checkpointId":"c1","keep":1,"writer":{"threadId":"\ud800","ownerToken":"x","fence":1}}`,
			http.StatusBadRequest, chain.CodeInvalidID)
		f.refused("writer not an object", http.MethodPost, path,
			`{"threadId":"t","checkpointId":"c1","keep":1,"writer":7}`, http.StatusBadRequest, chain.CodeInvalidID)
	}
}

func TestContentRefusedAfterTheIdentifiers(t *testing.T) {
	f := newFixture(t, server.Options{})
	w := f.writer(fmt.Sprint(f.w.Fence))
	fork := func(createdAt string) string {
		return `{"sourceThreadId":"t","sourceCheckpointId":"c1","destinationThreadId":"u","destinationCheckpointId":"d1"` +
			createdAt + `,"writer":` + w + `}`
	}
	for what, body := range map[string]string{
		"createdAt 1.5":     fork(`,"createdAt":1.5`),
		"createdAt \"1\"":   fork(`,"createdAt":"1"`),
		"createdAt 2^53":    fork(`,"createdAt":9007199254740992`),
		"createdAt null":    fork(`,"createdAt":null`),
		"createdAt missing": fork(``),
	} {
		f.refused("fork "+what, http.MethodPost, "/v1/checkpoints/fork", body, http.StatusBadRequest, chain.CodeInvalidEntry)
	}
	f.refused("append createdAt 1.5", http.MethodPost, "/v1/checkpoints/append", f.appendBody(`"c2"`, "1.5", fmt.Sprint(f.w.Fence)),
		http.StatusBadRequest, chain.CodeInvalidEntry)
	for _, keep := range []string{`1.5`, `-1`, `"1"`, `null`, `9007199254740992`} {
		f.refused("delete keep "+keep, http.MethodPost, "/v1/checkpoints/delete", `{"threadId":"t","keep":`+keep+`,"writer":`+w+`}`,
			http.StatusBadRequest, chain.CodeInvalidEntry)
	}
	f.refused("delete keep missing", http.MethodPost, "/v1/checkpoints/delete", `{"threadId":"t","writer":`+w+`}`,
		http.StatusBadRequest, chain.CodeInvalidEntry)
	f.refused("save: a message that is not JSON cannot be sent; messages not an array", http.MethodPost, "/v1/transcripts/save",
		`{"threadId":"t","messages":{"0":1}}`, http.StatusBadRequest, server.CodeBadRequest)
	f.refused("save: messages missing", http.MethodPost, "/v1/transcripts/save", `{"threadId":"t"}`, http.StatusBadRequest, server.CodeBadRequest)
	f.refused("acquire: takeOverDead not a boolean", http.MethodPost, "/v1/leases/acquire", `{"threadId":"v","takeOverDead":1}`,
		http.StatusBadRequest, server.CodeBadRequest)
}

func TestWritersThatMatchNoLease(t *testing.T) {
	f := newFixture(t, server.Options{})
	fence := fmt.Sprint(f.w.Fence)
	dst, err := f.db.AcquireWriter(context.Background(), "t2") // the fork destination's lease
	if err != nil {
		t.Fatal(err)
	}
	dstToken := fmt.Sprintf("%q", dst.OwnerToken)
	if dst.Fence != f.w.Fence {
		t.Fatalf("fence of t2 %d, of t %d: the writers below are built for equal fences", dst.Fence, f.w.Fence)
	}
	for _, wr := range []string{
		f.writer(`"` + fence + `"`), // a fence of the wrong type
		f.writer(fence + ".5"),
		f.writer(`-1`),
		f.writer(`null`),
		`{"threadId":"t","ownerToken":7,"fence":` + fence + `}`,
		`{"threadId":"t","fence":` + fence + `}`,
	} {
		for _, c := range []struct{ path, body string }{
			{"/v1/checkpoints/delete-head", `{"threadId":"t","checkpointId":"c1","writer":` + wr + `}`},
			{"/v1/checkpoints/delete", `{"threadId":"t","keep":0,"writer":` + wr + `}`},
			{"/v1/checkpoints/fork", `{"sourceThreadId":"t","sourceCheckpointId":"c1","destinationThreadId":"t2","destinationCheckpointId":"d1","createdAt":1,"writer":` +
				strings.Replace(strings.Replace(wr, `"t"`, `"t2"`, 1), fmt.Sprintf("%q", f.w.OwnerToken), dstToken, 1) + `}`},
			{"/v1/leases/renew", `{"writer":` + wr + `}`},
		} {
			f.refused("writer "+wr, http.MethodPost, c.path, c.body, http.StatusConflict, chain.CodeWriterLost)
		}
		f.refused("append with writer "+wr, http.MethodPost, "/v1/checkpoints/append",
			strings.Replace(f.appendBody(`"c2"`, "2", fence), f.writer(fence), wr, 1), http.StatusConflict, chain.CodeWriterLost)
	}
	// Release of a writer no lease matches does nothing, successfully.
	before := f.snapshot()
	if resp, eb, _ := f.do(http.MethodPost, "/v1/leases/release", `{"writer":`+f.writer(`"`+fence+`"`)+`}`); resp.StatusCode != http.StatusOK {
		t.Errorf("release of a writer no lease matches: %d %+v", resp.StatusCode, eb)
	}
	if d := cmp.Diff(before, f.snapshot()); d != "" {
		t.Errorf("release of a writer no lease matches changed the store:\n%s", d)
	}
	// The controls: the same requests with the fence as a number succeed.
	for _, c := range []struct{ path, body string }{
		{"/v1/leases/renew", `{"writer":` + f.writer(fence) + `}`},
		{"/v1/checkpoints/fork", `{"sourceThreadId":"t","sourceCheckpointId":"c1","destinationThreadId":"t2","destinationCheckpointId":"d1","createdAt":1,"writer":` +
			fmt.Sprintf(`{"threadId":"t2","ownerToken":%s,"fence":%s}`, dstToken, fence) + `}`},
		{"/v1/checkpoints/delete-head", `{"threadId":"t","checkpointId":"c1","writer":` + f.writer(fence) + `}`},
	} {
		if resp, eb, b := f.do(http.MethodPost, c.path, c.body); resp.StatusCode != http.StatusOK {
			t.Errorf("control %s: %d %+v", c.path, resp.StatusCode, eb)
		} else if c.path == "/v1/checkpoints/fork" && !strings.Contains(string(b), `"reason":"fork-root"`) {
			t.Errorf("control fork answered %s", b)
		}
	}
}

func TestInstanceRequestsOfTheWrongShape(t *testing.T) {
	f := newFixture(t, server.Options{})
	for what, c := range map[string]struct{ path, body string }{
		"get: key missing":        {"/v1/instances/get", `{}`},
		"get: key 7":              {"/v1/instances/get", `{"key":7}`},
		"get: key null":           {"/v1/instances/get", `{"key":null}`},
		"delete: key missing":     {"/v1/instances/delete", `{"id":"k"}`},
		"delete: key bytes !base": {"/v1/instances/delete", `{"key":{"bytes":"!"}}`},
		"upsert: no updatedAt":    {"/v1/instances/upsert", `{"key":"k","provider":"p","providerSandboxId":"s","threadId":"t"}`},
		"upsert: updatedAt 1.5":   {"/v1/instances/upsert", `{"key":"k","provider":"p","providerSandboxId":"s","threadId":"t","updatedAt":1.5}`},
		"upsert: provider null":   {"/v1/instances/upsert", `{"key":"k","provider":null,"providerSandboxId":"s","threadId":"t","updatedAt":1}`},
		"upsert: key 7":           {"/v1/instances/upsert", `{"key":7,"provider":"p","providerSandboxId":"s","threadId":"t","updatedAt":1}`},
	} {
		f.refused(what, http.MethodPost, c.path, c.body, http.StatusBadRequest, server.CodeBadRequest)
	}
}

// Responses carry messages byte for byte and null for what is absent.
func TestResponsesKeepMessageBytes(t *testing.T) {
	f := newFixture(t, server.Options{})
	for _, c := range []struct{ path, body, want string }{
		{"/v1/transcripts/load", `{"threadId":"t"}`, `{"messages":[{"m": [1,  2]}]}`},
		{"/v1/transcripts/load", `{"threadId":"never"}`, `{"messages":[]}`},
		{"/v1/checkpoints/get", `{"id":"nope"}`, `{"checkpoint":null}`},
		{"/v1/checkpoints/head", `{"threadId":"never"}`, `{"headId":null}`},
		{"/v1/checkpoints/get", `{"id":"c1"}`, `{"checkpoint":{"id":"c1","threadId":"t","parentCheckpointId":null,"createdAt":1,"reason":"automatic",` +
			`"files":[{"path":"a.txt","kind":"file","blobKey":"` + testkit.FileKey(1) + `","size":1}],"conversation":[ {"a" : 1} ],"artifacts":[]}}`},
		{"/v1/instances/get", `{"key":"nope"}`, `{"instance":null}`},
	} {
		resp, eb, b := f.do(http.MethodPost, c.path, c.body)
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != c.want {
			t.Errorf("%s %s: %d %+v %s, want %s", c.path, c.body, resp.StatusCode, eb, b, c.want)
		}
	}
	// A transcript saved through the API keeps each element's text.
	if resp, eb, _ := f.do(http.MethodPost, "/v1/transcripts/save", `{"threadId":"v","messages":[ {"x":1} ,"<&>"]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("save: %d %+v", resp.StatusCode, eb)
	}
	msgs, err := f.db.LoadThread(context.Background(), "v")
	if err != nil || len(msgs) != 2 || string(msgs[0]) != ` {"x":1} ` || string(msgs[1]) != `"<&>"` {
		t.Errorf("stored transcript %q, %v", msgs, err)
	}
}

// Null and absent name no checkpoint (a root, an empty thread); "" is
// INVALID_ID (SPEC §10 Q11). Messages are stored as the request spells
// them, whitespace around each included.
func TestAppendNullableIDsAndExactMessages(t *testing.T) {
	f := newFixture(t, server.Options{})
	l, err := f.db.AcquireWriter(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	w := fmt.Sprintf(`{"threadId":"n","ownerToken":%q,"fence":%d}`, l.OwnerToken, l.Fence)
	body := func(id, parent, expected, conv string) string {
		return `{"checkpoint":{"id":"` + id + `","threadId":"n"` + parent + `,"createdAt":1,"reason":"automatic","files":[],` +
			`"conversation":` + conv + `,"artifacts":[]}` + expected + `,"writer":` + w + `}`
	}
	for what, b := range map[string]string{
		`expectedHeadId ""`:                   body("r", ``, `,"expectedHeadId":""`, `[]`),
		`parentCheckpointId ""`:               body("r", `,"parentCheckpointId":""`, ``, `[]`),
		`both "" and createdAt out of range`:  strings.Replace(body("r", `,"parentCheckpointId":""`, `,"expectedHeadId":""`, `[]`), `"createdAt":1`, `"createdAt":1e400`, 1),
		`expectedHeadId 7`:                    body("r", ``, `,"expectedHeadId":7`, `[]`),
		`parentCheckpointId "\ud800"`:         body("r", `,"parentCheckpointId":"\ud800"`, ``, `[]`),
		`expectedHeadId "\ud800" (root)`:      body("r", ``, `,"expectedHeadId":"\ud800"`, `[]`),
		`expectedHeadId "\ud800" before body`: body("r", ``, `,"expectedHeadId":"\ud800"`, `{"not":"an array"}`),
	} {
		f.refused(what, http.MethodPost, "/v1/checkpoints/append", b, http.StatusBadRequest, chain.CodeInvalidID)
	}
	for i, b := range []string{
		body("r0", ``, ``, `[ {"a" : 1} ,"<&>",[1,  2] ]`), // absent: a root on an empty thread
		body("r1", `,"parentCheckpointId":"r0"`, `,"expectedHeadId":"r0"`, `[]`),
	} {
		if resp, eb, b := f.do(http.MethodPost, "/v1/checkpoints/append", b); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), fmt.Sprintf(`"headId":"r%d"`, i)) {
			t.Fatalf("append r%d: %d %+v %s", i, resp.StatusCode, eb, b)
		}
	}
	f.refused("explicit null expected on a thread with a head", http.MethodPost, "/v1/checkpoints/append",
		body("r2", `,"parentCheckpointId":null`, `,"expectedHeadId":null`, `[]`), http.StatusConflict, chain.CodeStaleHead)
	cp, err := f.db.Get(context.Background(), "r0")
	if err != nil || cp == nil {
		t.Fatal(cp, err)
	}
	want := []string{` {"a" : 1} `, `"<&>"`, `[1,  2] `}
	for i, m := range cp.Conversation {
		if i >= len(want) || string(m) != want[i] {
			t.Errorf("stored message %d = %q, want %q", i, m, want)
		}
	}
	if cp.ParentID != "" {
		t.Errorf("root's parent %q, want none", cp.ParentID)
	}
}

// Member names are exact, as the contract spells them: encoding/json would
// match {"threadid"} to threadId, and take the last of names that differ
// only in case.
func TestMemberNamesAreExact(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.refused("threadid", http.MethodPost, "/v1/checkpoints/head", `{"threadid":"t"}`, http.StatusBadRequest, chain.CodeInvalidID)
	f.refused("ID", http.MethodPost, "/v1/checkpoints/get", `{"ID":"c1"}`, http.StatusBadRequest, chain.CodeInvalidID)
	resp, _, body := f.do(http.MethodPost, "/v1/checkpoints/head", `{"threadId":"t","THREADID":"nothing"}`)
	var got struct{ HeadID *string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil || got.HeadID == nil || *got.HeadID != "c1" {
		t.Errorf(`head of {"threadId":"t","THREADID":"nothing"}: %d %s; want t's head c1`, resp.StatusCode, body)
	}
}
