package capture

import (
	"context"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// TestWalkOrder builds trees whose sibling names sort differently from the
// paths beneath them ("a" and "a-b", "a.b", "a0" beside a directory "a/";
// empty directories, recorded by their bare path) and checks that the walk
// lists exactly what is there in path byte order, without sorting the list.
func TestWalkOrder(t *testing.T) {
	names := []string{"a", "a-b", "a.b", "a0", "b", "é", "A", "a b", "_"}
	for seed := range testkit.Scale(t, uint64(10), 30) {
		r := rand.New(rand.NewPCG(seed, 3))
		root := t.TempDir()
		kinds := map[string]chain.Kind{}
		var fill func(dir, rel string, depth int)
		fill = func(dir, rel string, depth int) {
			for _, n := range names {
				p := n
				if rel != "" {
					p = rel + "/" + n
				}
				switch k := r.IntN(9); {
				case k == 0:
					// absent
				case k <= 3 && depth < 3:
					os.Mkdir(filepath.Join(dir, n), 0o755)
					before := len(kinds)
					fill(filepath.Join(dir, n), p, depth+1)
					if len(kinds) == before {
						kinds[p] = chain.KindDir // nothing beneath: an entry itself
					}
				case k == 4:
					os.Mkdir(filepath.Join(dir, n), 0o755)
					kinds[p] = chain.KindDir // empty: an entry itself
				case k == 5:
					os.Symlink("b", filepath.Join(dir, n))
					kinds[p] = chain.KindSymlink
				default:
					os.WriteFile(filepath.Join(dir, n), []byte(p), 0o644)
					kinds[p] = chain.KindFile
				}
			}
		}
		fill(root, "", 0)
		want := slices.Sorted(maps.Keys(kinds))
		dir, err := openWorkspace(root)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := walkTree(context.Background(), &walkInput{root: root, dir: dir, allowEscape: true, changes: &changeLog{}})
		dir.Close()
		if err != nil {
			t.Fatal(err)
		}
		paths := make([]string, len(got))
		for i, w := range got {
			paths[i] = w.path
			if w.kind != kinds[w.path] {
				t.Errorf("seed %d: %q is a %s, want %s", seed, w.path, w.kind, kinds[w.path])
			}
		}
		if !slices.Equal(paths, want) {
			t.Fatalf("seed %d: walk listed\n%q\nwant\n%q", seed, paths, want)
		}
	}
}

// TestFileTypeName: messages name a file's type in words, never by a mode
// string such as "p---------".
func TestFileTypeName(t *testing.T) {
	for _, tt := range []struct {
		mode fs.FileMode
		want string
	}{
		{0o644, "a regular file"},
		{fs.ModeDir | 0o755, "a directory"},
		{fs.ModeSymlink | 0o777, "a symlink"},
		{fs.ModeNamedPipe | 0o644, "a named pipe"},
		{fs.ModeSocket | 0o755, "a socket"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "a character device"},
		{fs.ModeDevice | 0o660, "a block device"},
		{fs.ModeIrregular, "an irregular file"},
	} {
		if got := fileTypeName(tt.mode); got != tt.want {
			t.Errorf("fileTypeName(%v) = %q, want %q", tt.mode, got, tt.want)
		}
	}
}
