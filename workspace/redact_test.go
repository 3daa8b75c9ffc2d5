package workspace_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/workspace"
)

// naiveRedact is the reference: it tries every secret at every offset of the
// original bytes, marks each covered position, then zeroes the marks.
func naiveRedact(secrets []string, in []byte) []byte {
	covered := make([]bool, len(in))
	for i := range in {
		for _, s := range secrets {
			if s != "" && bytes.HasPrefix(in[i:], []byte(s)) {
				for j := range len(s) {
					covered[i+j] = true
				}
			}
		}
	}
	out := bytes.Clone(in)
	for i, c := range covered {
		if c {
			out[i] = 0
		}
	}
	return out
}

func TestRedact(t *testing.T) {
	z := func(n int) string { return strings.Repeat("\x00", n) }
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"spec check value", []string{"secret"}, "x=secret", "x=" + z(6)},
		{"overlap of different secrets", []string{"abc", "bcd"}, "abcd", z(4)},
		{"self overlap", []string{"aa"}, "aaa", z(3)},
		{"self overlap longer", []string{"aba"}, "ababa", z(5)},
		{"adjacent", []string{"ab"}, "abab", z(4)},
		{"adjacent different", []string{"ab", "cd"}, "xabcdx", "x" + z(4) + "x"},
		{"nested", []string{"password", "ass"}, "my password!", "my " + z(8) + "!"},
		{"contained short secret alone", []string{"password", "ass"}, "pass", "p" + z(3)},
		{"separate", []string{"k1", "k2"}, "k1 and k2", z(2) + " and " + z(2)},
		{"at both ends", []string{"s"}, "sxs", z(1) + "x" + z(1)},
		{"whole input", []string{"all"}, "all", z(3)},
		{"no match", []string{"secret"}, "public", "public"},
		{"prefix only", []string{"secret"}, "secre", "secre"},
		{"empty input", []string{"x"}, "", ""},
		{"empty secret ignored", []string{"", "b"}, "abc", "a" + z(1) + "c"},
		{"utf-8", []string{"clé"}, "la clé!", "la " + z(4) + "!"},
		{"zero bytes in secret", []string{"a\x00b"}, "xa\x00by", "x" + z(3) + "y"},
		// Once "ab" is zeroed the bytes read "\x00\x00c", but that secret
		// does not occur in the original, so "c" is kept.
		{"found on original bytes", []string{"ab", "\x00\x00c"}, "abc", z(2) + "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := workspace.NewRedactor(tt.secrets)
			b := []byte(tt.in)
			r.Redact(b)
			if string(b) != tt.want {
				t.Errorf("Redact(%q) with %q = %q, want %q", tt.in, tt.secrets, b, tt.want)
			}
			if ref := naiveRedact(tt.secrets, []byte(tt.in)); string(ref) != tt.want {
				t.Errorf("reference(%q) = %q, want %q (bad test case)", tt.in, ref, tt.want)
			}
			got, err := io.ReadAll(r.Reader(iotest.OneByteReader(strings.NewReader(tt.in))))
			if err != nil || string(got) != tt.want {
				t.Errorf("Reader(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestNewRedactor(t *testing.T) {
	for _, secrets := range [][]string{nil, {}, {""}, {"", ""}} {
		if r := workspace.NewRedactor(secrets); r != nil {
			t.Errorf("NewRedactor(%q) = %v, want nil", secrets, r)
		}
	}
	r := workspace.NewRedactor([]string{"b", "", "a", "b", "a"})
	if r.Len() != 2 {
		t.Errorf("Len = %d, want 2 (empties and duplicates dropped)", r.Len())
	}
	if r.Fingerprint() != workspace.NewRedactor([]string{"a", "b"}).Fingerprint() {
		t.Error("duplicates or empties changed the fingerprint")
	}
}

func TestNilRedactor(t *testing.T) {
	var r *workspace.Redactor
	b := []byte("secret")
	r.Redact(b)
	if string(b) != "secret" {
		t.Errorf("nil Redact changed the bytes to %q", b)
	}
	src := strings.NewReader("x")
	if r.Reader(src) != io.Reader(src) {
		t.Error("nil Reader did not return src")
	}
	if r.Len() != 0 || r.Fingerprint() != [32]byte{} {
		t.Error("nil Redactor has a length or fingerprint")
	}
}

func TestFingerprint(t *testing.T) {
	fp := func(s ...string) [32]byte { return workspace.NewRedactor(s).Fingerprint() }
	if fp("x", "y") != fp("y", "x") {
		t.Error("fingerprint depends on order")
	}
	if fp("x") == fp("y") || fp("x") == fp("x", "y") {
		t.Error("different secret sets share a fingerprint")
	}
	// Without length prefixes both would hash "abc".
	if fp("ab", "c") == fp("a", "bc") || fp("abc") == fp("ab", "c") {
		t.Error("the encoding of the secret set is ambiguous")
	}
	if fp("x") == ([32]byte{}) {
		t.Error("a non-nil Redactor has the zero fingerprint")
	}
}

// TestRedactAllocs: Redact is used on every file of a capture, and must not
// allocate for a handful of secrets.
func TestRedactAllocs(t *testing.T) {
	r := workspace.NewRedactor([]string{"secret", "token-123", "ab"})
	b := []byte(strings.Repeat("x=secret; y=token-123; abab ", 100))
	if n := testing.AllocsPerRun(100, func() { r.Redact(b) }); n != 0 {
		t.Errorf("Redact allocates %v times per call, want 0", n)
	}
}

// TestRedactManySecrets goes past the secrets tracked on the stack.
func TestRedactManySecrets(t *testing.T) {
	var secrets []string
	for i := range 100 {
		secrets = append(secrets, fmt.Sprintf("s%03d", i))
	}
	in := []byte("s000 s050s051 s099 s100 s0")
	want := naiveRedact(secrets, in)
	workspace.NewRedactor(secrets).Redact(in)
	if !bytes.Equal(in, want) {
		t.Errorf("Redact = %q, want %q", in, want)
	}
}

// chunkReader returns between 1 and max bytes per Read, chosen at random.
type chunkReader struct {
	data []byte
	max  int
	rng  *rand.Rand
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+c.rng.IntN(c.max), len(p), len(c.data))
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// TestReaderRandom compares Redact, the streaming Reader under several
// chunkings and the naive reference on random inputs over a small alphabet,
// where secrets occur often and overlap.
func TestReaderRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aab\x00c"
	randString := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	iterations := testkit.ScaleShort(t, 300, 1000, 3000)
	for it := range iterations {
		secrets := make([]string, rng.IntN(4)+1)
		for i := range secrets {
			secrets[i] = randString(rng.IntN(6)) // sometimes empty
		}
		// Mostly short inputs to probe the boundaries; some longer than a
		// reader chunk (32 KiB).
		n := rng.IntN(200)
		if it%250 == 0 {
			n = 70000 + rng.IntN(1000)
		}
		in := []byte(randString(n))
		want := naiveRedact(secrets, in)

		r := workspace.NewRedactor(secrets)
		got := bytes.Clone(in)
		r.Redact(got)
		if !bytes.Equal(got, want) {
			t.Fatalf("secrets %q, input %q:\nRedact    %q\nreference %q", secrets, in, got, want)
		}

		readers := map[string]io.Reader{
			"whole":    bytes.NewReader(in),
			"one byte": iotest.OneByteReader(bytes.NewReader(in)),
			"half":     iotest.HalfReader(bytes.NewReader(in)),
			"data+EOF": iotest.DataErrReader(bytes.NewReader(in)),
			"chunks":   &chunkReader{data: in, max: 1 + rng.IntN(12), rng: rng},
		}
		for name, src := range readers {
			out, err := io.ReadAll(r.Reader(src))
			if err != nil {
				t.Fatalf("%s: ReadAll: %v", name, err)
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("%s: secrets %q, input %q:\nReader    %q\nreference %q", name, secrets, in, out, want)
			}
		}
		// Reads of random sizes into the redacting reader too.
		rd := r.Reader(&chunkReader{data: in, max: 7, rng: rng})
		var out []byte
		for {
			p := make([]byte, 1+rng.IntN(9))
			m, err := rd.Read(p)
			out = append(out, p[:m]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("small reads: secrets %q, input %q:\nReader    %q\nreference %q", secrets, in, out, want)
		}
	}
}

// TestReaderIOTest runs the standard io.Reader checks on a redacting reader.
func TestReaderIOTest(t *testing.T) {
	in := []byte(strings.Repeat("token=hunter2; ", 5000))
	want := naiveRedact([]string{"hunter2"}, in)
	r := workspace.NewRedactor([]string{"hunter2"})
	if err := iotest.TestReader(r.Reader(bytes.NewReader(in)), want); err != nil {
		t.Error(err)
	}
}

// TestReaderSourceError: on a failure other than EOF, the bytes before the
// held-back tail are returned, redacted, then the error; the tail, which
// could be the start of a secret, is not.
func TestReaderSourceError(t *testing.T) {
	boom := errors.New("boom")
	r := workspace.NewRedactor([]string{"secret"})
	src := io.MultiReader(strings.NewReader("x=secret y=secr"), iotest.ErrReader(boom))
	got, err := io.ReadAll(r.Reader(src))
	if !errors.Is(err, boom) {
		t.Fatalf("error = %v, want %v", err, boom)
	}
	// Five bytes ("=secr"), len("secret")-1, are held back and dropped.
	if want := "x=\x00\x00\x00\x00\x00\x00 y"; string(got) != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

// emptyReader always returns (0, nil).
type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

func TestReaderNoProgress(t *testing.T) {
	r := workspace.NewRedactor([]string{"s"})
	if _, err := r.Reader(emptyReader{}).Read(make([]byte, 8)); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("Read of a stuck source: error = %v, want io.ErrNoProgress", err)
	}
}

func BenchmarkRedact(b *testing.B) {
	r := workspace.NewRedactor([]string{"sk-live-0123456789", "hunter2", "AKIAEXAMPLEKEY"})
	data := bytes.Repeat([]byte("some ordinary source text, with a hunter2 now and then\n"), 20000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r.Redact(data)
	}
}

func ExampleRedactor_Redact() {
	r := workspace.NewRedactor([]string{"secret", "", "secret"})
	b := []byte("x=secret")
	r.Redact(b)
	fmt.Printf("%q (%d distinct secret)\n", b, r.Len())

	// Overlapping matches are found on the original bytes, and their union
	// is zeroed.
	b = []byte("abcd aaa")
	workspace.NewRedactor([]string{"abc", "bcd", "aa"}).Redact(b)
	fmt.Printf("%q\n", b)
	// Output:
	// "x=\x00\x00\x00\x00\x00\x00" (1 distinct secret)
	// "\x00\x00\x00\x00 \x00\x00\x00"
}
