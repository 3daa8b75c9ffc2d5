package lifecycle

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestJSNumber: numbers are written as JavaScript writes them.
func TestJSNumber(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0, "0"}, {math.Copysign(0, -1), "0"}, {1, "1"}, {-42, "-42"}, {1.5, "1.5"}, {0.1, "0.1"},
		{1e21, "1e+21"}, {1e20, "100000000000000000000"}, {123456789012345680000, "123456789012345680000"},
		{0.000001, "0.000001"}, {0.0000001, "1e-7"}, {1.5e-10, "1.5e-10"}, {2.5e300, "2.5e+300"},
		{math.NaN(), "null"}, {math.Inf(1), "null"}, {9007199254740993, "9007199254740992"},
	} {
		if got := jsNumber(c.f); got != c.want {
			t.Errorf("jsNumber(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// TestCanonical: keys in UTF-16 order (an astral character's surrogates
// sort below U+FFFF's), JavaScript's string escapes, no spaces; a struct
// goes through JSON.
func TestCanonical(t *testing.T) {
	got, err := canonical(map[string]any{
		"b": []any{true, nil, 2.0, "x\"y\\\n\u0001é"}, "a": map[string]any{}, "\U0001F600": 1.0, "\uFFFF": 2.0,
		"s": struct {
			N int `json:"n"`
		}{7},
	})
	want := `{"a":{},"b":[true,null,2,"x\"y\\\n\u0001é"],"s":{"n":7},"` + "\U0001F600" + `":1,"` + "\uFFFF" + `":2}`
	if err != nil || got != want {
		t.Errorf("canonical = %s, %v\nwant        %s", got, err, want)
	}
	if _, err := canonical(map[string]any{"c": make(chan int)}); err == nil {
		t.Error("canonical of a channel did not fail")
	}
}

// TestInstanceKeyProperties: what the key must and must not depend on.
func TestInstanceKeyProperties(t *testing.T) {
	ws := func() map[string]any {
		return map[string]any{
			"source":  map[string]any{"type": "git", "url": "https://example.invalid/r.git", "auth": map[string]any{"token": "t1", "user": "u"}},
			"secrets": map[string]any{"API_KEY": "k1"},
			"setup":   []any{"npm ci"},
		}
	}
	key := func(in KeyInput) string {
		t.Helper()
		k, err := InstanceKey(in)
		if err != nil {
			t.Fatal(err)
		}
		if len(k) != 16 || strings.Trim(k, "0123456789abcdef") != "" {
			t.Fatalf("key %q is not 16 hex digits", k)
		}
		return k
	}
	base := KeyInput{ThreadID: "t", SandboxID: "s", ProviderName: "docker", Workspace: ws()}
	k0 := key(base)
	rotated := base
	rotated.Workspace = ws()
	rotated.Workspace["secrets"] = map[string]any{"API_KEY": "k2"}
	rotated.Workspace["source"].(map[string]any)["auth"].(map[string]any)["token"] = "t2"
	if key(rotated) != k0 {
		t.Error("rotating a secret or the git token changed the key")
	}
	user := "alice"
	for name, in := range map[string]KeyInput{
		"thread":   {ThreadID: "t2", SandboxID: "s", ProviderName: "docker", Workspace: ws()},
		"sandbox":  {ThreadID: "t", SandboxID: "s2", ProviderName: "docker", Workspace: ws()},
		"provider": {ThreadID: "t", SandboxID: "s", ProviderName: "e2b", Workspace: ws()},
		"none":     {ThreadID: "t", SandboxID: "s", ProviderName: "docker"},
		"tenant":   {ThreadID: "t", SandboxID: "s", ProviderName: "docker", Workspace: ws(), Tenant: &Tenant{UserID: &user}},
		"setup": {ThreadID: "t", SandboxID: "s", ProviderName: "docker", Workspace: func() map[string]any {
			w := ws()
			w["setup"] = []any{"npm install"}
			return w
		}()},
	} {
		if key(in) == k0 {
			t.Errorf("changing the %s kept the key", name)
		}
	}
}

// TestInstanceKeyMatchesJavaScript computes the keys of random inputs here
// and in Node, with JSON.stringify, Object.keys().sort() and the two
// FNV-1a lanes over charCodeAt, and requires the same strings.
func TestInstanceKeyMatchesJavaScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node is required in CI: %v", err)
		}
		t.Skipf("no node to compare with: %v", err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	words := []string{"", "a", "Z", "é", "日本", "\U0001F600", "\"q\"", "back\\slash", "line\nbreak", "\u0007", "\uFFFF", "token", "secrets", "type", "git"}
	var value func(depth int) any
	value = func(depth int) any {
		switch n := rnd.IntN(8); {
		case n == 0:
			return nil
		case n == 1:
			return rnd.IntN(2) == 0
		case n == 2:
			return []float64{0, 1, -3, 0.5, 1e21, 1e-7, 123.456, 2e-6}[rnd.IntN(8)]
		case n < 5 || depth > 2:
			return words[rnd.IntN(len(words))]
		case n == 5:
			a := []any{}
			for range rnd.IntN(3) {
				a = append(a, value(depth+1))
			}
			return a
		default:
			m := map[string]any{}
			for range rnd.IntN(4) {
				m[words[rnd.IntN(len(words))]] = value(depth + 1)
			}
			return m
		}
	}
	type jsInput struct {
		ThreadID     string         `json:"threadId"`
		SandboxID    string         `json:"sandboxId"`
		ProviderName string         `json:"providerName"`
		Workspace    map[string]any `json:"workspace,omitempty"`
		Tenant       map[string]any `json:"tenant,omitempty"`
	}
	var inputs []jsInput
	var want []string
	for i := range 200 {
		in := KeyInput{ThreadID: words[rnd.IntN(len(words))], SandboxID: fmt.Sprint(i), ProviderName: words[rnd.IntN(len(words))]}
		j := jsInput{ThreadID: in.ThreadID, SandboxID: in.SandboxID, ProviderName: in.ProviderName}
		if rnd.IntN(4) > 0 {
			ws := map[string]any{"root": value(1), "setup": value(1)}
			if rnd.IntN(2) == 0 {
				ws["source"] = map[string]any{"type": "git", "auth": map[string]any{"token": value(2), "user": value(2)}}
			}
			if rnd.IntN(2) == 0 {
				ws["secrets"] = value(1)
			}
			in.Workspace, j.Workspace = ws, ws
		}
		if rnd.IntN(3) == 0 {
			u, o := words[rnd.IntN(len(words))], words[rnd.IntN(len(words))]
			in.Tenant, j.Tenant = &Tenant{UserID: &u}, map[string]any{"userId": u}
			if rnd.IntN(2) == 0 {
				in.Tenant.OrgID, j.Tenant["orgId"] = &o, o
			}
		}
		k, err := InstanceKey(in)
		if err != nil {
			t.Fatal(err)
		}
		inputs, want = append(inputs, j), append(want, k)
	}
	b, err := json.Marshal(inputs)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "-e", jsKey)
	cmd.Stdin = strings.NewReader(string(b))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	if len(got) != len(want) {
		t.Fatalf("node computed %d keys for %d inputs", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("input %d (%s): Go %s, JavaScript %s", i, b, want[i], got[i])
			break
		}
	}
}

// jsKey computes the keys of the JSON array on standard input in
// JavaScript, by SPEC §8's description.
const jsKey = `
let input = '';
process.stdin.on('data', (d) => { input += d });
process.stdin.on('end', () => {
  const h = (s) => {
    let a = 0x811c9dc5, b = 0x811c9dc5;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      a = Math.imul(a ^ (c & 0xff), 0x01000193);
      b = Math.imul(b ^ ((c >> 8) & 0xff), 0x01000193);
    }
    return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0');
  };
  const canon = (v) => {
    if (v === null || typeof v !== 'object') return JSON.stringify(v);
    if (Array.isArray(v)) return '[' + v.map(canon).join(',') + ']';
    return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canon(v[k])).join(',') + '}';
  };
  const wsHash = (ws) => {
    if (!ws) return h('no-workspace');
    const rest = Object.assign({}, ws);
    delete rest.secrets;
    const src = rest.source;
    if (src && src.type === 'git' && src.auth) {
      const auth = Object.assign({}, src.auth);
      delete auth.token;
      rest.source = Object.assign({}, src, { auth });
    }
    return h(canon(rest));
  };
  const keys = JSON.parse(input).map((i) => h(canon({
    threadId: i.threadId, sandboxId: i.sandboxId, providerName: i.providerName,
    workspaceHash: wsHash(i.workspace), tenant: i.tenant ?? null,
  })));
  process.stdout.write(JSON.stringify(keys));
});
`
