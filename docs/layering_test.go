package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// goFiles parses the non-test Go files of dir, relative to the root.
func goFiles(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(dir, name)
		f, err := parser.ParseFile(fset, filepath.Join(root, path), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[path] = f
	}
	if len(files) == 0 {
		t.Fatalf("%s holds no Go file", dir)
	}
	return files
}

// TestModelPackagesStayOffTheStore checks the public/internal line: the
// model (chain) and the lease handle (lease) import neither bbolt nor the
// store's internal packages, so only the engine touches sbx.db.
func TestModelPackagesStayOffTheStore(t *testing.T) {
	for _, dir := range []string{"chain", "lease"} {
		for path, f := range goFiles(t, dir) {
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(p, "go.etcd.io/bbolt") || strings.HasPrefix(p, "github.com/sbxdb/sbxdb/internal/meta") || strings.HasPrefix(p, "github.com/sbxdb/sbxdb/engine") {
					t.Errorf("%s imports %s", path, p)
				}
			}
		}
	}
}

// TestServerAndClientMeetOnlyOnTheWire checks the served path's layering:
// the server reaches the store only through the engine's public API (no
// bbolt, no store-internal package), the client only through the wire, and
// neither imports the other: what both need of the wire is internal/wire
// (the document's encodings, header names and codes, written once), so
// docs/API.md is the whole contract between them and any other client (the
// TypeScript package) can implement it.
func TestServerAndClientMeetOnlyOnTheWire(t *testing.T) {
	forbidden := map[string][]string{
		"server": {"go.etcd.io/bbolt", "github.com/sbxdb/sbxdb/internal/meta", "github.com/sbxdb/sbxdb/internal/boltcheck", "github.com/sbxdb/sbxdb/client"},
		"client": {"go.etcd.io/bbolt", "github.com/sbxdb/sbxdb/internal/meta", "github.com/sbxdb/sbxdb/internal/boltcheck", "github.com/sbxdb/sbxdb/server"},
	}
	for dir, bad := range forbidden {
		for path, f := range goFiles(t, dir) {
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range bad {
					if strings.HasPrefix(p, b) {
						t.Errorf("%s imports %s", path, p)
					}
				}
			}
		}
	}
}

// TestBucketNamesDeclaredOnce checks that the names of sbx.db's buckets and
// keys are spelt only in the two schema files: internal/meta/schema.go for
// the store's, cas/format.go for the blob index's.
func TestBucketNamesDeclaredOnce(t *testing.T) {
	schema := map[string]bool{}
	for _, f := range goFiles(t, "internal/meta") {
		ast.Inspect(f, func(n ast.Node) bool {
			if v, ok := n.(*ast.ValueSpec); ok {
				for i, name := range v.Names {
					if (strings.HasPrefix(name.Name, "Bucket") || strings.HasPrefix(name.Name, "Key")) && i < len(v.Values) {
						if s := byteStringLit(v.Values[i]); s != "" {
							schema[s] = true
						}
					}
				}
			}
			return true
		})
	}
	if !schema["checkpoints"] || !schema["writers"] || !schema["instances"] {
		t.Fatalf("the bucket names read from internal/meta are %v; the declarations changed shape", schema)
	}
	for _, dir := range []string{"chain", "lease", "engine", "gc", "cas", "internal/meta", "cmd/sbxdb"} {
		for path, f := range goFiles(t, dir) {
			if path == filepath.Join("internal", "meta", "schema.go") || path == filepath.Join("cas", "format.go") {
				continue
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if e, ok := n.(ast.Expr); ok {
					if s := byteStringLit(e); schema[s] {
						t.Errorf("%s spells the bucket or key name %q; use internal/meta's declaration", path, s)
					}
				}
				return true
			})
		}
	}
}

// byteStringLit returns s for the expression []byte("s"), else "".
func byteStringLit(e ast.Expr) string {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return ""
	}
	if at, ok := call.Fun.(*ast.ArrayType); !ok || at.Len != nil || !isIdent(at.Elt, "byte") {
		return ""
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// TestDeps checks, on everything each package links (go list -deps), that
// the contract and what is built on it alone stay off the implementations:
// the contract package (the module root), the Go client, the in-memory
// reference store and the conformance kit link no storage engine (bbolt,
// pgx, minio-go), no Prometheus and none of sbxdb's store packages. A host
// that talks to a server links the contract and the client only.
func TestDeps(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command to list dependencies with: %v", err)
	}
	forbidden := []string{
		"go.etcd.io/bbolt", "github.com/jackc/pgx", "github.com/minio/minio-go", "github.com/prometheus/",
		"github.com/sbxdb/sbxdb/engine", "github.com/sbxdb/sbxdb/cas", "github.com/sbxdb/sbxdb/gc",
		"github.com/sbxdb/sbxdb/server", "github.com/sbxdb/sbxdb/internal/meta", "github.com/sbxdb/sbxdb/internal/kv",
		"github.com/sbxdb/sbxdb/internal/objstore",
	}
	for _, pkg := range []string{".", "./client", "./memstore", "./storetest", "./lifecycle"} {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for dep := range strings.FieldsSeq(string(out)) {
			for _, bad := range forbidden {
				if strings.HasPrefix(dep, bad) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}
