// Package workload generates a deterministic, realistic agent workspace: the
// kind of directory tree an AI coding agent works in and sbxdb checkpoints.
//
// The benchmarks use it to time sbxdb's capture and restore against peer
// tools (git, tar | zstd, see package peers) on the same tree. A Spec fixes
// the tree completely: the same Spec always yields byte-identical file
// contents, the same paths, modes, empty directories and symlink targets,
// whatever the scheduling of the writer goroutines. Only timestamps differ
// between two generations (files get their real write times, so tools that
// detect changes by mtime see Edit's changes).
//
// The tree looks like a mid-sized polyglot repository:
//
//	README.md, docs/…               Markdown
//	src/<pkg>/[<sub>/…]             Go, TypeScript or Python packages (a
//	                                language per package), with some JSON and
//	                                Markdown, directory depth 2 to 6 and
//	                                varied fan-out
//	test/<pkg>/…                    tests in the package's language
//	test/fixtures/golden/           one big directory (up to 1,000 JSON files)
//	third_party/<pkg>/…             exact copies of src files (vendored code)
//	scripts/…, tools/bin/…          executables (mode 0755, with a shebang)
//	assets/<kind>/…                 MB-sized binaries
//
// plus empty directories, relative symlinks to files of the tree, a few
// non-ASCII names ("docs/résumé.md", "src/日本/readme.md") and two empty
// files. Text is plausible source code built from a vocabulary of
// identifiers and line templates with a seeded PCG generator; zstd -1
// compresses it about 3.7x (Go, TypeScript, Python 3.7–3.8x, Markdown 3.2x,
// JSON 4.7x). Binaries mix random chunks (incompressible) with repetitive
// and low-entropy ones and compress about 1.6x.
//
// Spec.NodeModules adds node_modules/, shaped like an npm install (see
// NodeModules): thousands of small files in packages several levels deep,
// nested node_modules, .bin symlinks and a few native binaries. Default()
// and Quick() have it: most of their files are there.
//
// No name outside node_modules is one that sbxdb's default capture policy
// excludes (".git", ".env*", a root CLAUDE.md or GEMINI.md), and there is
// no .gitignore; node_modules is excluded by default, so a capture that is
// to see the same entries as git and tar must drop the default exclusions
// (workspace.Policy.NoDefaultExclude). Git does not record empty
// directories; that is the only entry kind one peer loses.
package workload

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// Spec describes a generated workspace. The same Spec always yields a
// byte-identical tree (contents, paths, modes, symlink targets).
type Spec struct {
	// Seed selects the tree; any value is valid.
	Seed int64
	// TextFiles is the number of text files, including the Executables, the
	// duplicates (DupFraction), a handful of fixed ones (README.md, the
	// non-ASCII names) and two empty files. Their target sizes are 1–30 KB,
	// skewed towards small ones; a file ends at the first block boundary
	// past its target, so real sizes run from ~1.1 to ~33 KB (median ~9 KB,
	// mean ~11.4 KB).
	TextFiles int
	// Binaries is the number of 1–8 MiB binary files under assets/, partly
	// random (incompressible), partly repetitive.
	Binaries int
	// DupFraction is the share of TextFiles that are exact copies of
	// another text file (vendored code under third_party/), e.g. 0.03.
	DupFraction float64
	// EmptyDirs is the number of empty directories.
	EmptyDirs int
	// Symlinks is the number of relative symlinks, each pointing to a
	// regular file of the tree.
	Symlinks int
	// Executables is the number of text files (shell and Python scripts)
	// with mode 0755; the other files have mode 0644.
	Executables int
	// NodeModules is the node_modules part of the tree (see NodeModules);
	// its zero value plans none, and the rest of the tree does not depend
	// on it.
	NodeModules NodeModules
}

// Default returns the Spec of the standard benchmark tree, shaped like a
// JavaScript workspace after npm install: about 22,500 files and 235 MB in
// all. The source part has 3,900 text files, 3 binaries, 20 empty
// directories, 4 symlinks and 20 executables; node_modules has 18,600
// files in about 2,800 directories, 3 native binaries and 18 .bin symlinks.
func Default() Spec {
	return Spec{
		Seed:        1,
		TextFiles:   3900,
		Binaries:    3,
		DupFraction: 0.03,
		EmptyDirs:   20,
		Symlinks:    4,
		Executables: 20,
		NodeModules: NodeModules{Files: 18600, Binaries: 3, BinLinks: 18},
	}
}

// Quick returns the Spec of a tree a tenth of Default's for --quick runs
// and tests: about 2,250 files and 26 MB; 390 source text files, 1
// binary, 5 empty directories, 3 symlinks and 5 executables, and 1,860
// node_modules files with 1 native binary and 5 .bin symlinks.
func Quick() Spec {
	return Spec{
		Seed:        1,
		TextFiles:   390,
		Binaries:    1,
		DupFraction: 0.03,
		EmptyDirs:   5,
		Symlinks:    3,
		Executables: 5,
		NodeModules: NodeModules{Files: 1860, Binaries: 1, BinLinks: 5},
	}
}

// Stats counts what Generate wrote. The root directory itself is not
// counted in Dirs; Bytes is the sum of the regular files' sizes (symlinks
// and directories count nothing).
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
}

func (s Spec) validate() error {
	switch {
	case s.TextFiles < 0, s.Binaries < 0, s.EmptyDirs < 0, s.Symlinks < 0, s.Executables < 0:
		return fmt.Errorf("workload: negative count in %+v", s)
	case math.IsNaN(s.DupFraction) || s.DupFraction < 0 || s.DupFraction >= 1:
		return fmt.Errorf("workload: DupFraction %v not in [0, 1)", s.DupFraction)
	case s.Executables > s.TextFiles:
		return fmt.Errorf("workload: Executables %d > TextFiles %d", s.Executables, s.TextFiles)
	case s.Symlinks > 0 && s.TextFiles+s.Binaries == 0:
		return errors.New("workload: symlinks need at least one file to point to")
	case s.NodeModules.validate() != nil:
		return fmt.Errorf("workload: NodeModules %+v: %w", s.NodeModules, s.NodeModules.validate())
	}
	return nil
}

// Generate writes the tree of s under dir and returns what it wrote. dir
// must not exist or be an empty directory; it is created with its parents,
// and its mode is set to 0755. Files are written by a few goroutines, each file from its own
// seeded generator, so the result does not depend on scheduling. Nothing is
// fsynced. Modes are set explicitly (0644, 0755 for executables and
// directories), whatever the umask.
func Generate(dir string, s Spec) (Stats, error) {
	if err := s.validate(); err != nil {
		return Stats{}, err
	}
	if err := emptyOrAbsent(dir); err != nil {
		return Stats{}, err
	}
	p := buildPlan(s)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Stats{}, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return Stats{}, err
	}
	for _, d := range p.dirs { // sorted: parents first
		full := filepath.Join(dir, filepath.FromSlash(d))
		if err := os.Mkdir(full, 0o755); err != nil {
			return Stats{}, err
		}
		if err := os.Chmod(full, 0o755); err != nil {
			return Stats{}, err
		}
	}
	sizes := make([]int64, len(p.files))
	err := parallel(len(p.files), func(i int, buf *[]byte) error {
		e := &p.files[i]
		b := e.content((*buf)[:0])
		*buf = b
		full := filepath.Join(dir, filepath.FromSlash(e.path))
		if err := os.WriteFile(full, b, e.mode); err != nil {
			return err
		}
		if err := os.Chmod(full, e.mode); err != nil {
			return err
		}
		sizes[i] = int64(len(b))
		return nil
	})
	if err != nil {
		return Stats{}, err
	}
	for _, l := range p.links {
		if err := os.Symlink(l.target, filepath.Join(dir, filepath.FromSlash(l.path))); err != nil {
			return Stats{}, err
		}
	}
	st := Stats{Files: len(p.files), Dirs: len(p.dirs), Symlinks: len(p.links)}
	for _, n := range sizes {
		st.Bytes += n
	}
	return st, nil
}

// Edit deterministically modifies a fraction of the text files of a tree
// that Generate(dir, s) wrote, the way an agent's turn does: in each chosen
// file it replaces one to four lines with a few new ones (40–160 bytes
// each time) and, in about 60 % of them, appends a block of 200 B–2 KB;
// every chosen file really changes.
// Files are rewritten in place (same inode, mode kept, new mtime).
//
// The candidates are all TextFiles of s (binaries are never edited, as
// agents edit source); round(fraction × TextFiles) of them are chosen, at
// least one when fraction > 0, all when fraction ≥ 1. The choice and the new
// content depend only on (s, fraction, round) and on the files' current
// contents, so applying the same sequence of Edits to the same generated
// tree always gives the same tree. Use a new round number for each
// successive edit of one tree to get different changes.
//
// Edit returns the changed files' slash-separated paths relative to dir,
// sorted, and the sum of their sizes after the edit. Nothing is fsynced.
func Edit(dir string, s Spec, fraction float64, round int) (paths []string, bytes int64, err error) {
	if err := s.validate(); err != nil {
		return nil, 0, err
	}
	if math.IsNaN(fraction) || fraction < 0 {
		return nil, 0, fmt.Errorf("workload: edit fraction %v < 0", fraction)
	}
	p := buildPlan(s)
	var cand []int
	for i := range p.files {
		if p.files[i].kind != kindBinary && !p.files[i].node {
			cand = append(cand, i)
		}
	}
	k := int(math.Round(min(fraction, 1) * float64(len(cand))))
	if k == 0 && fraction > 0 && len(cand) > 0 {
		k = 1
	}
	r := newRand(uint64(s.Seed), uint64(round), math.Float64bits(fraction), saltEditPick)
	for i := range k { // partial Fisher-Yates: cand[:k] is the choice
		j := i + r.IntN(len(cand)-i)
		cand[i], cand[j] = cand[j], cand[i]
	}
	chosen := cand[:k]
	sizes := make([]int64, k)
	err = parallel(k, func(n int, buf *[]byte) error {
		i := chosen[n]
		e := &p.files[i]
		full := filepath.Join(dir, filepath.FromSlash(e.path))
		old, err := os.ReadFile(full)
		if err != nil {
			return err
		}
		er := newRand(uint64(s.Seed), uint64(round), uint64(i), saltEditFile)
		b := editContent((*buf)[:0], old, e.lang, er)
		*buf = b
		f, err := os.OpenFile(full, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		sizes[n] = int64(len(b))
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	paths = make([]string, k)
	for n, i := range chosen {
		paths[n] = p.files[i].path
		bytes += sizes[n]
	}
	slices.Sort(paths)
	return paths, bytes, nil
}

// emptyOrAbsent fails unless dir does not exist or is an empty directory.
func emptyOrAbsent(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("workload: %s is not empty", dir)
	}
	if err != nil && err != io.EOF {
		return fmt.Errorf("workload: %s: %w", dir, err)
	}
	return nil
}

// parallel runs fn(0..n-1) on a few goroutines, each with its own reusable
// buffer, and returns the first error seen (the others stop taking work).
func parallel(n int, fn func(i int, buf *[]byte) error) error {
	workers := min(max(runtime.GOMAXPROCS(0), 2)*2, 16, n)
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			var buf []byte
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i, &buf); err != nil {
					errOnce.Do(func() { first = err })
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

var (
	errNegative  = errors.New("negative count")
	errNodeFiles = errors.New("Files must hold the binaries, the .bin targets and the lock file")
)
