package workspace

import (
	"testing"

	"github.com/sbxdb/sbxdb/chain"
)

func TestIgnoreFile(t *testing.T) {
	pats, err := ParseIgnore("# build output\n*.log\n!keep.log\n\nbuild/\n/TODO  \n\\#hash\n")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Policy{}.WithIgnore(RuleIgnoreFile, pats)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		kind chain.Kind
		rule string
	}{
		{"a.log", chain.KindFile, RuleIgnoreFile},
		{"x/y/a.log", chain.KindFile, RuleIgnoreFile},
		{"keep.log", chain.KindFile, ""},   // negated: the last match decides
		{"x/keep.log", chain.KindFile, ""}, // at any depth
		{"build", chain.KindDir, RuleIgnoreFile},
		{"build", chain.KindFile, ""}, // build/ is for directories
		{"TODO", chain.KindFile, RuleIgnoreFile},
		{"src/TODO", chain.KindFile, ""}, // anchored
		{"#hash", chain.KindFile, RuleIgnoreFile},
		{".git", chain.KindDir, RuleGit}, // the defaults come first
		{"main.go", chain.KindFile, ""},
	} {
		if got := p.SkipRule(c.path, c.kind); got != c.rule {
			t.Errorf("SkipRule(%q, %s) = %q, want %q", c.path, c.kind, got, c.rule)
		}
	}
	if p.Admits("build/keep.log", chain.KindFile) {
		t.Error("a file beneath an ignored directory is admitted")
	}
	// A negation cannot undo a default exclusion.
	q, _ := Policy{}.WithIgnore(RuleIgnoreFile, []string{"!.env"})
	if q.SkipRule(".env", chain.KindFile) != RuleEnv {
		t.Error("!.env re-included .env")
	}
	if _, err := ParseIgnore("ok\n[unclosed\n"); err == nil {
		t.Error("an invalid pattern parsed")
	}
}
