package wire

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// TestTable round-trips every row of the table: a sending row's error,
// bare and wrapped, is sent as its code (so no earlier row shadows it); a
// receiving row's code comes back as an error matching the row's error;
// a row that does both holds error → code → error. Every code has one
// receiving row and a status.
func TestTable(t *testing.T) {
	receivers := map[string]int{}
	for _, r := range table {
		if _, ok := status[r.code]; !ok {
			t.Errorf("%s has no status", r.code)
		}
		if r.way != recv {
			for _, err := range []error{r.err, fmt.Errorf("doing something: %w", r.err)} {
				if got, ok := Code(err); !ok || got != r.code {
					t.Errorf("Code(%v) = %q, %v; want %q", err, got, ok, r.code)
				}
			}
		}
		if r.way != send {
			receivers[r.code]++
			if got := Sentinel(r.code); !errors.Is(got, r.err) {
				t.Errorf("Sentinel(%s) = %v, which does not match %v", r.code, got, r.err)
			}
		}
		if r.way == both {
			code, _ := Code(r.err)
			if back := Sentinel(code); !errors.Is(back, r.err) {
				t.Errorf("%v → %s → %v, which does not match it", r.err, code, back)
			}
		}
	}
	for code := range status {
		if receivers[code] != 1 {
			t.Errorf("%s has %d receiving rows, want 1", code, receivers[code])
		}
	}
}

// TestCodeOrder checks the matches that the order of the checks decides.
func TestCodeOrder(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		// A poisoned store's error names its cause, which may match
		// another row: the store being poisoned is what the host must
		// know.
		{"poisoned by a damaged blob", fmt.Errorf("%w: %w", sbxdb.ErrPoisoned, sbxdb.ErrBlobCorrupt), CodePoisoned},
		{"poisoned by an outage", fmt.Errorf("%w: %w", sbxdb.ErrPoisoned, sbxdb.ErrMetadataUnavailable), CodePoisoned},
		// A contract code wins over every row (chain.Code comes first).
		{"poisoned by a contract error", fmt.Errorf("%w: %w", sbxdb.ErrPoisoned, chain.ErrWriterLost), chain.CodeWriterLost},
		{"an identifier past its limit", chain.CheckID("id", strings.Repeat("x", chain.MaxIDBytes+1)), chain.CodeInvalidID},
		{"a blob in use while pinned", fmt.Errorf("%w: k: %w", sbxdb.ErrBlobInUse, errors.New("pinned")), CodeBlobInUse},
		{"a blob error", &sbxdb.BlobError{Key: "k", Err: sbxdb.ErrBlobNotFound}, CodeNotFound},
		{"an ambiguous reference", &sbxdb.AmbiguousRefError{Ref: "a", Candidates: []string{"ab", "ac"}, Count: 2}, CodeAmbiguous},
	} {
		if got, ok := Code(c.err); !ok || got != c.want {
			t.Errorf("%s: Code = %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
	if got, ok := Code(errors.New("something else")); ok {
		t.Errorf("Code(an unknown error) = %q, want none", got)
	}
	if got := Sentinel("SBXDB_FROM_A_NEWER_SERVER"); got != ErrInternal {
		t.Errorf("Sentinel(an unknown code) = %v, want ErrInternal", got)
	}
	if got := Status("SBXDB_FROM_A_NEWER_SERVER"); got != 500 {
		t.Errorf("Status(an unknown code) = %d, want 500", got)
	}
}

// TestStatusAsDocumented reads the table of docs/API.md's Errors section:
// every code it lists has the status it lists, and it lists every code.
func TestStatusAsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Errors\n")
	if !ok {
		t.Fatal("docs/API.md has no Errors section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| (.*) \\|$")
	code := regexp.MustCompile("`((?:SANDBOX_SNAPSHOT|SBXDB)_[A-Z_]+)`")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		want, _ := strconv.Atoi(m[1])
		for _, c := range code.FindAllStringSubmatch(m[2], -1) {
			documented[c[1]] = true
			if got := Status(c[1]); got != want {
				t.Errorf("Status(%s) = %d, docs/API.md says %d", c[1], got, want)
			}
		}
	}
	if len(documented) == 0 {
		t.Fatal("read no code from docs/API.md's Errors table; its shape changed")
	}
	for c := range status {
		if !documented[c] {
			t.Errorf("%s is not in docs/API.md's Errors table", c)
		}
	}
}
