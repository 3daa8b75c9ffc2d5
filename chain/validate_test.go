package chain

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The sorted path of ValidateFiles must report exactly what the map-based
// path reports, on sorted manifests full of near-misses: names that sort
// between a file and its "file/" block ("a-b", "a.x"), files beneath files,
// symlinks, duplicates, bad paths and bad fields.
func TestValidateSortedFilesAgreesWithAnyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	segs := []string{"a", "a-b", "a.x", "a0", "b", "b!"}
	key := FilePrefix + strings.Repeat("ab", 32)
	errs, oks := 0, 0
	for range 20000 {
		n := 1 + r.IntN(8)
		files := make([]Entry, 0, n)
		for range n {
			depth := 1 + r.IntN(3)
			parts := make([]string, depth)
			for d := range parts {
				parts[d] = segs[r.IntN(len(segs))]
			}
			e := Entry{Path: strings.Join(parts, "/")}
			switch r.IntN(10) {
			case 0, 1, 2:
				e.Kind = KindDir
			case 3:
				e.Kind, e.Target = KindSymlink, "x"
			case 4:
				e.Path += "/" // an empty segment
				e.Kind = KindDir
			case 5:
				e.Kind, e.BlobKey = KindFile, "bad" // bad fields
			default:
				e.Kind, e.BlobKey, e.Size = KindFile, key, 1
			}
			files = append(files, e)
		}
		slices.SortFunc(files, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
		got, want := fmt.Sprint(validateSortedFiles(files)), fmt.Sprint(validateFilesAnyOrder(files))
		if got != want {
			t.Fatalf("%v:\nsorted path:    %s\nany-order path: %s", files, got, want)
		}
		if want == "<nil>" {
			oks++
		} else {
			errs++
		}
	}
	if oks < 1000 || errs < 1000 {
		t.Fatalf("unbalanced cases: %d valid, %d invalid", oks, errs)
	}
}

func BenchmarkValidateFiles20000(b *testing.B) {
	files := make([]Entry, 0, 20000)
	key := FilePrefix + strings.Repeat("ab", 32)
	for i := range 20000 {
		files = append(files, Entry{Path: fmt.Sprintf("src/pkg%03d/sub%d/file%05d.go", i/100, i%7, i), Kind: KindFile, BlobKey: key, Size: 1})
	}
	slices.SortFunc(files, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	b.Run("sorted", func(b *testing.B) {
		for b.Loop() {
			if err := ValidateFiles(files); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("any-order", func(b *testing.B) {
		for b.Loop() {
			if err := validateFilesAnyOrder(files); err != nil {
				b.Fatal(err)
			}
		}
	})
}
