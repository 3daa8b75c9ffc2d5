package workload

import (
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// kind is what a planned file holds.
type kind uint8

const (
	kindText   kind = iota // generated text
	kindEmpty              // zero bytes
	kindBinary             // 1–8 MiB of mixed random and repetitive bytes
	kindNative             // a native binary of node_modules: compresses about 2x
)

// lang is the language of a text file's content.
type lang uint8

const (
	langGo lang = iota
	langTS
	langPy
	langMD
	langJSON
	langSh
	langTxt
)

var langExt = [...]string{langGo: ".go", langTS: ".ts", langPy: ".py", langMD: ".md", langJSON: ".json", langSh: ".sh", langTxt: ".txt"}

// Salts keep the random streams of different purposes apart.
const (
	saltPlan uint64 = iota + 0x5b3d_0000
	saltFile
	saltEditPick
	saltEditFile
	saltNode
)

// entry is one planned regular file. Its content is a function of
// (kind, lang, size, seed, shebang) only, so a duplicate that copies these
// fields has the same bytes.
type entry struct {
	path    string // slash-separated, relative to the root
	kind    kind
	lang    lang
	shebang bool // scripts: start with #! (and are executable)
	size    int  // target size in bytes
	seed    uint64
	mode    os.FileMode // permission bits
	node    bool        // in the node_modules part
}

// link is one planned symlink.
type link struct {
	path, target string
}

// plan is the whole tree of a Spec, computed from the Spec alone.
type plan struct {
	files []entry
	dirs  []string // every directory but the root, sorted (parents first)
	links []link
}

// newRand returns a PCG generator seeded from the mixed words.
func newRand(words ...uint64) *rand.Rand {
	var a, b uint64 = 0x243f6a8885a308d3, 0x13198a2e03707344
	for _, w := range words {
		a = splitmix(a ^ w)
		b = splitmix(b + w*0x9e3779b97f4a7c15)
	}
	return rand.New(rand.NewPCG(a, b))
}

// splitmix is the SplitMix64 finaliser, a good 64-bit mixer.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// textSize draws a text file's target size: 1–30 KB, skewed to small ones.
func textSize(r *rand.Rand) int {
	u := r.Float64()
	return 1024 + int(29*1024*u*u)
}

// fixedFiles are always planned first (as far as TextFiles allows).
var fixedFiles = []struct {
	path string
	kind kind
	lang lang
}{
	{"README.md", kindText, langMD},
	{"docs/résumé.md", kindText, langMD},
	{"src/日本/readme.md", kindText, langMD},
	{"src/__init__.py", kindEmpty, langPy},
	{"test/fixtures/empty.txt", kindEmpty, langTxt},
	{"test/données/exemple.json", kindText, langJSON},
}

// planner builds a plan; it owns the one random stream of the plan.
type planner struct {
	s     Spec
	r     *rand.Rand
	n     int // file counter, for unique names
	files []entry
	used  map[string]bool // every planned path (files, dirs, links)
}

// srcPkg is a planned package under src/.
type srcPkg struct {
	name string
	lang lang
	dirs []string
}

// buildPlan lays out the whole tree of s: every file with its path, mode,
// size and content seed, every directory and every symlink. It draws from
// one random stream in a fixed order, so it depends on s alone.
func buildPlan(s Spec) *plan {
	pl := &planner{s: s, r: newRand(uint64(s.Seed), saltPlan), used: map[string]bool{}}
	r := pl.r
	T := s.TextFiles

	nExec := min(s.Executables, T)
	nFixed := min(len(fixedFiles), T-nExec)
	rem := T - nExec - nFixed
	nDup := min(int(s.DupFraction*float64(T)+0.5), rem/3)
	rem -= nDup
	nBig := 0
	if rem >= 400 {
		nBig = min(1000, rem/20)
	}
	rem -= nBig
	nDocs := rem * 4 / 100
	nTest := rem * 12 / 100
	nSrc := rem - nDocs - nTest

	for _, f := range fixedFiles[:nFixed] {
		pl.add(f.path, f.kind, f.lang, false)
	}

	// Executables: shell scripts under scripts/, Python tools under tools/bin.
	for i := range nExec {
		if i%3 == 2 {
			pl.add("tools/bin/"+pl.name(langPy, ""), kindText, langPy, true)
		} else {
			dir := "scripts/"
			if r.IntN(3) == 0 {
				dir += pick(r, []string{"ci", "dev", "release"}) + "/"
			}
			pl.add(dir+pl.name(langSh, ""), kindText, langSh, true)
		}
	}

	// Binaries under assets/<kind>/.
	for range s.Binaries {
		k := r.IntN(len(assetKinds))
		p := "assets/" + assetKinds[k].dir + "/" + pick(r, words) + "_" + pl.num() + assetKinds[k].ext
		pl.add(p, kindBinary, langTxt, false)
	}

	// The big directory.
	for range nBig {
		pl.add("test/fixtures/golden/case_"+pl.num()+".json", kindText, langJSON, false)
	}

	// Docs: docs/<topic>[/<sub>].
	docDirs := pl.dirSet(max(1, nDocs/15), func() string {
		d := "docs/" + pick(r, docTopics)
		if r.IntN(2) == 0 {
			d += "/" + pick(r, words)
		}
		return d
	})
	pl.spread(nDocs, docDirs, langMD)

	// Source packages.
	var pkgs []srcPkg
	if nSrc > 0 {
		nPkg := max(1, (nSrc+79)/80)
		seen := map[string]bool{}
		for range nPkg {
			name := pick(r, words)
			for i := 2; seen[name]; i++ {
				name = pick(r, words) + strconv.Itoa(i)
			}
			seen[name] = true
			pk := srcPkg{name: name, lang: pickLang(r)}
			root := "src/" + name
			pk.dirs = append(pk.dirs, root)
			pk.dirs = pl.subdirs(root, 0, pk.dirs)
			pkgs = append(pkgs, pk)
		}
	}

	// Tests: test/<pkg>[/<sub>[/<sub>]], in the package's language.
	type tdir struct {
		dir  string
		lang lang
	}
	var tdirs []tdir
	if nTest > 0 {
		seen := map[string]bool{}
		for range max(1, nTest/25) {
			l, name := pickLang(r), pick(r, words)
			if len(pkgs) > 0 {
				pk := pkgs[r.IntN(len(pkgs))]
				l, name = pk.lang, pk.name
			}
			d := "test/" + name
			if r.IntN(2) == 0 {
				d += "/" + pick(r, subNames)
				if r.IntN(4) == 0 {
					d += "/" + pick(r, subNames)
				}
			}
			if !seen[d] {
				seen[d] = true
				tdirs = append(tdirs, tdir{d, l})
			}
		}
	}
	w := weights(r, len(tdirs))
	for range nTest {
		td := tdirs[weighted(r, w)]
		l := td.lang
		if r.IntN(10) == 0 {
			l = langJSON
		}
		pl.add(td.dir+"/"+pl.name(l, "test"), kindText, l, false)
	}

	// Source files, spread over all package directories with uneven weights.
	type sdir struct {
		dir  string
		lang lang
	}
	var sdirs []sdir
	for _, pk := range pkgs {
		for _, d := range pk.dirs {
			sdirs = append(sdirs, sdir{d, pk.lang})
		}
	}
	w = weights(r, len(sdirs))
	firstSrc := len(pl.files)
	for range nSrc {
		sd := sdirs[weighted(r, w)]
		l := sd.lang
		switch x := r.IntN(100); {
		case x < 8:
			l = langMD
		case x < 20:
			l = langJSON
		}
		pl.add(sd.dir+"/"+pl.name(l, ""), kindText, l, false)
	}

	// Duplicates: vendored copies of distinct src files, same relative path
	// under third_party/.
	srcIdx := make([]int, 0, nSrc)
	for i := firstSrc; i < len(pl.files); i++ {
		srcIdx = append(srcIdx, i)
	}
	nDup = min(nDup, len(srcIdx))
	for i := range nDup {
		j := i + r.IntN(len(srcIdx)-i)
		srcIdx[i], srcIdx[j] = srcIdx[j], srcIdx[i]
		o := pl.files[srcIdx[i]]
		o.path = "third_party/" + strings.TrimPrefix(o.path, "src/")
		pl.use(o.path)
		pl.files = append(pl.files, o)
	}

	// Directories holding files, then empty directories, then symlinks.
	dirs := map[string]bool{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if dirs[d] {
				break
			}
			dirs[d] = true
		}
	}
	for _, f := range pl.files {
		addParents(f.path)
	}
	fileDirs := sortedKeys(dirs)
	for i := range s.EmptyDirs {
		parent := ""
		if len(fileDirs) > 0 && r.IntN(5) != 0 {
			parent = fileDirs[r.IntN(len(fileDirs))] + "/"
		}
		name := pick(r, emptyNames)
		p := parent + name
		if pl.used[p] || dirs[p] {
			p = parent + name + "_" + strconv.Itoa(i)
		}
		pl.use(p)
		dirs[p] = true
		addParents(p)
	}
	var links []link
	for i := range s.Symlinks {
		t := pl.files[r.IntN(len(pl.files))].path
		dir := "."
		if len(fileDirs) > 0 && r.IntN(4) != 0 {
			dir = fileDirs[r.IntN(len(fileDirs))]
		}
		p := path.Join(dir, pick(r, words)+"_link_"+strconv.Itoa(i)+path.Ext(t))
		rel, err := filepath.Rel(filepath.FromSlash(dir), filepath.FromSlash(t))
		if err != nil {
			panic(err) // both are clean relative paths
		}
		pl.use(p)
		addParents(p)
		links = append(links, link{path: p, target: filepath.ToSlash(rel)})
	}
	links = append(links, pl.planNodeModules(s.NodeModules, addParents)...)
	return &plan{files: pl.files, dirs: sortedKeys(dirs), links: links}
}

// add plans a file; its content seed is its index.
func (pl *planner) add(p string, k kind, l lang, exec bool) {
	pl.use(p)
	e := entry{path: p, kind: k, lang: l, shebang: exec, mode: 0o644,
		seed: splitmix(uint64(len(pl.files)) ^ splitmix(uint64(pl.s.Seed)^saltFile))}
	if exec {
		e.mode = 0o755
	}
	switch k {
	case kindText:
		e.size = textSize(pl.r)
	case kindBinary:
		e.size = 1<<20 + pl.r.IntN(7<<20+1)
	}
	pl.files = append(pl.files, e)
}

// use records a path; planning the same path twice is a bug.
func (pl *planner) use(p string) {
	if pl.used[p] {
		panic("workload: path planned twice: " + p)
	}
	pl.used[p] = true
}

// num returns the next file number, zero-padded to four digits.
func (pl *planner) num() string {
	pl.n++
	s := strconv.Itoa(pl.n)
	if len(s) < 4 {
		s = "0000"[len(s):] + s
	}
	return s
}

// name returns a unique file name for language l; role "test" names a test
// file the way its language does.
func (pl *planner) name(l lang, role string) string {
	w, n := pick(pl.r, words), pl.num()
	if role == "test" {
		switch l {
		case langGo:
			return w + "_" + n + "_test.go"
		case langTS:
			return w + "_" + n + ".test.ts"
		case langPy:
			return "test_" + w + "_" + n + ".py"
		}
	}
	return w + "_" + n + langExt[l]
}

// dirSet returns n distinct directories drawn from gen (fewer if gen
// repeats itself).
func (pl *planner) dirSet(n int, gen func() string) []string {
	seen := map[string]bool{}
	var out []string
	for range n {
		d := gen()
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// spread plans n files of language l over dirs with uneven weights.
func (pl *planner) spread(n int, dirs []string, l lang) {
	w := weights(pl.r, len(dirs))
	for range n {
		pl.add(dirs[weighted(pl.r, w)]+"/"+pl.name(l, ""), kindText, l, false)
	}
}

// subdirs appends the nested subdirectories of parent (depth levels below
// a package root) to out: at most four levels, fewer and fewer deeper down.
func (pl *planner) subdirs(parent string, depth int, out []string) []string {
	r := pl.r
	var n int
	switch depth {
	case 0:
		n = r.IntN(4)
	case 1:
		n = r.IntN(3)
	case 2:
		if r.IntN(2) == 0 {
			n = 1 + r.IntN(2)
		}
	case 3:
		if r.IntN(10) < 3 {
			n = 1
		}
	}
	seen := map[string]bool{}
	for range n {
		name := pick(r, subNames)
		if seen[name] {
			continue
		}
		seen[name] = true
		d := parent + "/" + name
		out = append(out, d)
		out = pl.subdirs(d, depth+1, out)
	}
	return out
}

// weights returns n cumulative weights with a heavy tail, so that some
// directories get many files and most get a few.
func weights(r *rand.Rand, n int) []float64 {
	cum := make([]float64, n)
	sum := 0.0
	for i := range cum {
		u := r.Float64()
		sum += 0.03 + u*u*u
		cum[i] = sum
	}
	return cum
}

// weighted draws an index from cumulative weights.
func weighted(r *rand.Rand, cum []float64) int {
	x := r.Float64() * cum[len(cum)-1]
	i, _ := slices.BinarySearch(cum, x)
	return min(i, len(cum)-1)
}

func pickLang(r *rand.Rand) lang {
	switch x := r.IntN(100); {
	case x < 45:
		return langGo
	case x < 75:
		return langTS
	default:
		return langPy
	}
}

func pick(r *rand.Rand, list []string) string { return list[r.IntN(len(list))] }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var assetKinds = []struct{ dir, ext string }{
	{"models", ".bin"}, {"images", ".png"}, {"fonts", ".woff2"}, {"wasm", ".wasm"}, {"data", ".parquet"},
}

var docTopics = []string{
	"architecture", "guides", "api", "design", "runbooks", "adr", "tutorials", "reference", "ops", "notes",
}

var subNames = []string{
	"internal", "api", "util", "model", "handlers", "service", "store", "core", "types", "v2",
	"legacy", "impl", "adapters", "middleware", "schema", "migrations", "parser", "client",
	"server", "config", "cache", "events", "jobs", "views", "components", "hooks", "lib",
	"common", "proto", "metrics",
}

var emptyNames = []string{
	"build", "dist", "out", "tmp", "cache", ".cache", "logs", "coverage", "__pycache__",
	"testdata", "generated", ".pytest_cache", "artifacts",
}
