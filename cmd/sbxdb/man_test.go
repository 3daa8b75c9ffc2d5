package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMan: sbxdb man writes sbxdb.1 and one page per command, each naming
// the command and its summary, the same bytes on a second run.
func TestMan(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000") // the pages' date: else this month's
	dir := filepath.Join(t.TempDir(), "man1")
	ok(t, "man", dir)
	for _, c := range commands {
		b, err := os.ReadFile(filepath.Join(dir, "sbxdb-"+c.name+".1"))
		if err != nil {
			t.Errorf("no page for %s: %v", c.name, err)
			continue
		}
		page := strings.Join(strings.Fields(string(b)), " ")
		if !strings.Contains(page, ".SH NAME") || !strings.Contains(page, strings.Join(strings.Fields(c.summary), " ")[:20]) {
			t.Errorf("the page of %s lacks its name section or summary:\n%s", c.name, b[:min(len(b), 400)])
		}
	}
	first, err := os.ReadFile(filepath.Join(dir, "sbxdb.1"))
	if err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(t.TempDir(), "again")
	ok(t, "man", again)
	if second, _ := os.ReadFile(filepath.Join(again, "sbxdb.1")); string(second) != string(first) {
		t.Error("two runs wrote different pages")
	}
}
