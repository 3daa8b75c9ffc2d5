package main

import (
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
)

// lsEntries lists the entries at or beneath a path, with the directories
// above them that the manifest does not record, in path byte order
// whatever the manifest's order.
func TestLsEntries(t *testing.T) {
	file := func(p string) chain.Entry { return chain.Entry{Path: p, Kind: chain.KindFile, Size: 1} }
	files := []chain.Entry{ // not in path order: a manifest of any order is valid
		file("src/lib/deep/x.go"),
		file("src-old/y"),
		{Path: "src/empty", Kind: chain.KindDir},
		file("src/a"),
		{Path: "top", Kind: chain.KindSymlink, Target: "src/a"},
		file("README"),
	}
	for _, tc := range []struct {
		under string
		want  string // paths, implied ones marked +
	}{
		{".", "README +src +src-old src-old/y src/a src/empty +src/lib +src/lib/deep src/lib/deep/x.go top"},
		{"src", "+src src/a src/empty +src/lib +src/lib/deep src/lib/deep/x.go"},
		{"src/lib/deep", "+src/lib/deep src/lib/deep/x.go"},
		{"src/lib/deep/x.go", "src/lib/deep/x.go"},
		{"src/empty", "src/empty"},
		{"top", "top"},
		{"sr", ""},
		{"src/a/b", ""},
		{"../src", ""},
	} {
		var got []string
		for _, e := range lsEntries(files, tc.under) {
			p := e.Path
			if e.implied {
				p = "+" + p
			}
			got = append(got, p)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("lsEntries(%q) = %v, want %s", tc.under, got, tc.want)
		}
	}
	for in, want := range map[string]string{
		"": ".", "/": ".", ".": ".", "./": ".", "src": "src", "/src/": "src", "//src//lib/./": "src/lib",
		"src/../top": "top", "../x": "../x",
	} {
		if got := lsPath(in); got != want {
			t.Errorf("lsPath(%q) = %q, want %q", in, got, want)
		}
	}
}
