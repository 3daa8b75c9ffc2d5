package chain

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Integers are read from the decimal text, not through a float64, which
// rounds fractions such as 1.0000000000000001 into integers (found by
// FuzzJSON).
func TestJSONIntegersAreExact(t *testing.T) {
	for in, want := range map[string]struct {
		n  int64
		ok bool
	}{
		"1.0": {1, true}, "1.0000000000000001": {0, false}, "0.99999999999999999": {0, false},
		"4503599627370496.5": {0, false}, "1e-400": {0, false}, "0e-400": {0, true}, "15e2": {1500, true},
		"1500e-3": {0, false}, "1500e-2": {15, true}, "-2.50e1": {-25, true}, "9007199254740991.0": {9007199254740991, true},
		"9007199254740992.0": {0, false}, "1e16": {0, false}, "0.0": {0, true}, "-0.0": {0, true}, "1e99999999999999999999": {0, false},
		"0e99999999999999999999": {0, true}, "12": {12, true}, "1.5": {0, false}, "100e-2": {1, true},
	} {
		n, ok := parseSafeInt([]byte(in))
		if n != want.n || ok != want.ok {
			t.Errorf("%s: %d %v, want %d %v", in, n, ok, want.n, want.ok)
		}
	}
}

// A lone surrogate in a path survives JSON out and back (found by
// FuzzJSON: encoding/json wrote U+FFFD for each of its WTF-8 bytes), and a
// string with raw invalid UTF-8 is refused on the way in.
func TestJSONRoundTripsLoneSurrogates(t *testing.T) {
	in := []byte(`{"id":"c","threadId":"t","parentCheckpointId":null,"createdAt":1,"reason":"automatic",` +
		`"files":[{"path":"a\ud800b","kind":"file","blobKey":"sandbox-files/sha256/` + strings.Repeat("a", 64) + `","size":1}],` +
		`"conversation":[],"artifacts":[{"artifactId":"x","name":"n\udfff","mimeType":"m","blobKey":"sandbox-artifacts/sha256/` + strings.Repeat("b", 64) + `","size":2,"createdAt":3}]}`)
	cp, err := ParseCheckpoint(in)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Files[0].Path != "a\xed\xa0\x80b" {
		t.Fatalf("path %q, want the WTF-8 bytes of U+D800", cp.Files[0].Path)
	}
	out, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"a\ud800b"`) || !strings.Contains(string(out), `"n\udfff"`) {
		t.Fatalf("lone surrogates not escaped: %s", out)
	}
	back, err := ParseCheckpoint(out)
	if err != nil || !reflect.DeepEqual(back, cp) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, back, cp)
	}
	raw := []byte(strings.Replace(string(in), `a\ud800b`, "a\xaab", 1))
	if _, err := ParseCheckpoint(raw); Code(err) == "" {
		t.Fatalf("raw invalid UTF-8 in a path: %v, want a contract error", err)
	}
}
