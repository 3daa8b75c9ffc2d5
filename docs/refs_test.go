package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository root, one level above this package.
const root = ".."

// specSections reads the section numbers of docs/SPEC.md ("1", "1.2", …)
// from its headings, and the decision ids ("Q1", …) of section 10's table.
func specSections(t *testing.T) (sections, decisions map[string]bool) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "SPEC.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	heading := regexp.MustCompile(`^#{2,4} ([0-9]+(?:\.[0-9]+)*)\.? `)
	decision := regexp.MustCompile(`^\| ?(Q[0-9]+) ?\|`)
	sections, decisions = map[string]bool{}, map[string]bool{}
	inDecisions := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := heading.FindStringSubmatch(line); m != nil {
			sections[m[1]] = true
			inDecisions = strings.HasPrefix(line, "## 10.")
		}
		if m := decision.FindStringSubmatch(line); m != nil && inDecisions {
			decisions[m[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(sections) < 10 || len(decisions) < 10 {
		t.Fatalf("docs/SPEC.md: found %d sections and %d decisions; the heading or table format changed", len(sections), len(decisions))
	}
	return sections, decisions
}

// sourceFiles lists the repository's Go, Markdown, shell and TypeScript
// files, skipping testdata, node_modules and hidden directories.
func sourceFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".ts":
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestSpecReferencesResolve checks that every "§n" or "§n.m" cited anywhere
// names a section of docs/SPEC.md, and every "§10 Qn" a decision of its
// section 10.
func TestSpecReferencesResolve(t *testing.T) {
	sections, decisions := specSections(t)
	ref := regexp.MustCompile(`§ ?([0-9]+(?:\.[0-9]+)*)(?: (Q[0-9]+))?`)
	cited := 0
	for _, path := range sourceFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range ref.FindAllStringSubmatch(line, -1) {
				cited++
				num := strings.TrimSuffix(m[1], ".")
				if !sections[num] {
					t.Errorf("%s:%d: %q names no section of docs/SPEC.md", rel(path), i+1, m[0])
				}
				if m[2] != "" && (num != "10" || !decisions[m[2]]) {
					t.Errorf("%s:%d: %q names no decision of docs/SPEC.md §10", rel(path), i+1, m[0])
				}
			}
		}
	}
	if cited == 0 {
		t.Fatal("no § reference found anywhere: the pattern no longer matches how the code cites docs/SPEC.md")
	}
}

// TestDocumentPathsExist checks that every relative Markdown link and every
// backquoted repository path (a word with a slash, ending in a source file
// extension) in the documents names a file or directory that exists. A
// backquoted path is read from the document's directory or from the
// repository root; one whose first directory exists in neither names a file
// of another project (a generated tree, the reference repository) and is
// not checked. docs/SPEC.md describes the reference's files, so its paths
// are not checked either.
func TestDocumentPathsExist(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)
	quoted := regexp.MustCompile("`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+\\.(?:go|md|sh|json|ts))`")
	checked := 0
	for _, path := range sourceFiles(t) {
		if filepath.Ext(path) != ".md" {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
					t.Errorf("%s:%d: link %q: %v", rel(path), i+1, target, err)
				}
			}
			if rel(path) == filepath.Join("docs", "SPEC.md") {
				continue
			}
			for _, m := range quoted.FindAllStringSubmatch(line, -1) {
				target := m[1]
				first := strings.SplitN(target, "/", 2)[0]
				found, ours := false, false
				for _, base := range []string{filepath.Dir(path), root} {
					if _, err := os.Stat(filepath.Join(base, target)); err == nil {
						found = true
					}
					if st, err := os.Stat(filepath.Join(base, first)); err == nil && st.IsDir() {
						ours = true
					}
				}
				if !ours {
					continue
				}
				checked++
				if !found {
					t.Errorf("%s:%d: path %q does not exist", rel(path), i+1, target)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no link or path found in any document: the patterns no longer match")
	}
}

// TestCommentPathsExist checks that every repository file a Go comment
// names (a path such as internal/capture/walk.go or internal/meta/refs.go,
// whose first directory is one of the repository's) exists, so comments
// follow the files they point to when those move.
func TestCommentPathsExist(t *testing.T) {
	named := regexp.MustCompile(`\b([a-z][a-z0-9_]*(?:/[a-z0-9_]+)*/[a-z0-9_]+\.go)\b`)
	checked := 0
	for _, path := range sourceFiles(t) {
		if filepath.Ext(path) != ".go" {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			_, comment, ok := strings.Cut(line, "//")
			if !ok {
				continue
			}
			for _, m := range named.FindAllStringSubmatch(comment, -1) {
				target := m[1]
				first := strings.SplitN(target, "/", 2)[0]
				if st, err := os.Stat(filepath.Join(root, first)); err != nil || !st.IsDir() {
					continue // another project's path
				}
				checked++
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s:%d: the comment names %q, which does not exist", rel(path), i+1, target)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no comment names a repository file: the pattern no longer matches")
	}
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}
