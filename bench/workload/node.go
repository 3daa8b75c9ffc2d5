package workload

import (
	"math"
	"math/rand/v2"
	"path"
	"strconv"
	"strings"
)

// NodeModules describes the node_modules part of a Spec: the tree an npm
// install leaves in a JavaScript workspace. Its zero value plans nothing.
//
// The part is laid out as npm lays it out: node_modules/<pkg> and
// node_modules/@<scope>/<pkg> packages, each with a package.json and
// mostly a README.md and a LICENSE, code under lib/, dist/ and the like
// (*.js, *.mjs, *.cjs, *.d.ts, *.js.map), nested node_modules/<pkg>
// directories that hold other versions of top-level packages (exact copies
// of many of their files), node_modules/.bin/<name> symlinks to
// ../<pkg>/bin/<name>.js and a few native binaries (*.node, an esbuild-like
// executable). File sizes follow the histogram of a real npm install (most
// files 256 B–8 KB, a tail up to 2 MB); directories go up to 11 levels deep
// below the root; zstd -1 compresses the text about 4–5x and the binaries
// about 2x.
type NodeModules struct {
	// Files is the number of regular files under node_modules/, the
	// binaries and the BinLinks' targets included.
	Files int
	// Binaries is the number of native binaries among Files, 2–12 MiB
	// each, about half of their bytes incompressible.
	Binaries int
	// BinLinks is the number of node_modules/.bin symlinks, each to an
	// executable (mode 0755) script of a package, counted in Files.
	BinLinks int
}

func (n NodeModules) validate() error {
	switch {
	case n.Files < 0, n.Binaries < 0, n.BinLinks < 0:
		return errNegative
	case n.Files > 0 && n.Binaries+n.BinLinks+1 > n.Files:
		return errNodeFiles
	case n.Files == 0 && n.Binaries+n.BinLinks > 0:
		return errNodeFiles
	}
	return nil
}

// Languages of the node_modules part (the content generators of text.go
// for the rest).
const (
	langJS      lang = iota + 32 // .js, .mjs, .cjs: TypeScript-like code
	langMap                      // .js.map: a source map
	langLicense                  // LICENSE: MIT text
	langPkg                      // package.json
	langDTS                      // .d.ts: declarations
)

// nodeSizeLog2 weighs the sizes of the node_modules files by power of two
// (bucket b holds sizes in [2^b, 2^(b+1))), as counted in a real npm
// install of 25,600 files: the counts of buckets 4 to 20.
var nodeSizeLog2 = [...]float64{279, 510, 1829, 2131, 3272, 3932, 4339, 3112, 2356, 1663, 953, 534, 241, 168, 87, 48, 30}

// nodeDirNames name the directories inside a package.
var nodeDirNames = []string{
	"lib", "dist", "esm", "cjs", "src", "types", "internal", "utils", "helpers", "plugins",
	"compiled", "build", "modules", "core", "runtime", "shared", "locale", "rules", "parsers",
	"generated", "server", "client", "node", "browser", "es", "umd", "fp", "data", "schemas", "polyfills",
}

// nodeSize draws the size of a node_modules text file.
func nodeSize(r *rand.Rand, cum []float64) int {
	b := 4 + weighted(r, cum)
	lo := math.Exp2(float64(b))
	return int(lo * math.Exp2(r.Float64()))
}

// nodePkg is one planned package.
type nodePkg struct {
	dir   string // e.g. node_modules/@scope/name or node_modules/a/node_modules/b
	name  string
	files []int // indexes into planner.files
}

// planNodeModules appends the node_modules part of s to the plan: files,
// their directories (to dirs) and the .bin symlinks (returned). It draws
// from its own random stream, so the rest of the tree does not depend on
// it.
func (pl *planner) planNodeModules(nm NodeModules, addParents func(string)) []link {
	if nm.Files == 0 {
		return nil
	}
	r := newRand(uint64(pl.s.Seed), saltNode)
	cum := make([]float64, len(nodeSizeLog2))
	sum := 0.0
	for i, w := range nodeSizeLog2 {
		sum += w
		cum[i] = sum
	}
	add := func(p string, l lang, size int, exec bool) int {
		pl.add(p, kindText, l, exec)
		e := &pl.files[len(pl.files)-1]
		e.size, e.node = size, true
		addParents(p)
		return len(pl.files) - 1
	}
	names := map[string]bool{}
	newName := func() string {
		for i := 0; ; i++ {
			n := pick(r, words)
			if r.IntN(3) == 0 {
				n += "-" + pick(r, words)
			}
			if r.IntN(3) == 0 {
				n = "@" + pick(r, words) + "/" + n
			}
			if i > 3 {
				n += strconv.Itoa(i)
			}
			if !names[n] {
				names[n] = true
				return n
			}
		}
	}

	left := nm.Files - nm.Binaries - nm.BinLinks - 1 // the lock file below
	var top, all []*nodePkg
	add("node_modules/.package-lock.json", langPkg, 64<<10+r.IntN(256<<10), false)

	// Native binaries, each in a package of its own with a package.json.
	for i := range nm.Binaries {
		p := &nodePkg{name: newName()}
		p.dir = "node_modules/" + p.name
		var bin string
		switch i % 3 {
		case 0:
			bin = p.dir + "/bin/" + strings.TrimPrefix(path.Base(p.name), "@")
		case 1:
			bin = p.dir + "/" + path.Base(p.name) + ".linux-x64-gnu.node"
		default:
			bin = p.dir + "/build/Release/" + path.Base(p.name) + ".node"
		}
		pl.add(bin, kindNative, langTxt, i%3 == 0)
		e := &pl.files[len(pl.files)-1]
		e.size, e.node = 2<<20+r.IntN(10<<20+1), true
		addParents(bin)
		if left > 0 {
			p.files = append(p.files, add(p.dir+"/package.json", langPkg, 400+r.IntN(1200), false))
			left--
		}
		top = append(top, p)
	}

	// Packages until the files are used up: most small, a few with
	// hundreds of files (a log-normal count).
	for left > 0 {
		n := min(3+int(math.Exp(2.2+1.4*r.NormFloat64())), 1500, left)
		if left-n < 3 {
			n = left
		}
		left -= n
		p := &nodePkg{name: newName()}
		p.dir = "node_modules/" + p.name
		if len(top) > 8 && r.IntN(8) == 0 {
			// Nested: another version of a top-level package under the
			// node_modules of a package that depends on it.
			parent := top[r.IntN(len(top))]
			for r.IntN(5) == 0 && len(all) > 0 {
				parent = all[r.IntN(len(all))]
			}
			orig := top[r.IntN(len(top))]
			p.name = orig.name
			p.dir = parent.dir + "/node_modules/" + orig.name
			if pl.used[p.dir+"/package.json"] {
				p.name = newName()
				p.dir = parent.dir + "/node_modules/" + p.name
			} else {
				// Most of its files are the same as the other version's.
				for _, i := range orig.files {
					if n == 0 {
						break
					}
					if r.IntN(10) < 7 {
						o := pl.files[i]
						o.path = p.dir + strings.TrimPrefix(o.path, orig.dir)
						pl.use(o.path)
						addParents(o.path)
						pl.files = append(pl.files, o)
						p.files = append(p.files, len(pl.files)-1)
						n--
					}
				}
			}
		}
		pl.nodePackage(r, p, n, cum, add)
		all = append(all, p)
		if !strings.Contains(strings.TrimPrefix(p.dir, "node_modules/"), "/node_modules/") {
			top = append(top, p)
		}
	}

	// .bin: one executable script per link, in a top-level package.
	var links []link
	binNames := map[string]bool{}
	for i := range nm.BinLinks {
		p := top[r.IntN(len(top))]
		name := strings.TrimPrefix(path.Base(p.name), "@")
		if binNames[name] {
			name += "-" + strconv.Itoa(i)
		}
		binNames[name] = true
		target := p.dir + "/bin/" + name + ".js"
		if pl.used[target] {
			target = p.dir + "/bin/" + name + "-" + strconv.Itoa(i) + ".js"
		}
		add(target, langJS, 200+r.IntN(4000), true)
		lp := "node_modules/.bin/" + name
		pl.use(lp)
		addParents(lp)
		links = append(links, link{path: lp, target: "../" + strings.TrimPrefix(target, "node_modules/")})
	}
	return links
}

// nodePackage plans n more files of package p: package.json, README.md,
// LICENSE, then code, declarations and source maps over a few nested
// directories.
func (pl *planner) nodePackage(r *rand.Rand, p *nodePkg, n int, cum []float64, add func(string, lang, int, bool) int) {
	put := func(rel string, l lang, size int) {
		full := p.dir + "/" + rel
		if pl.used[full] {
			full = p.dir + "/" + strings.TrimSuffix(rel, path.Ext(rel)) + "_" + pl.num() + path.Ext(rel)
		}
		p.files = append(p.files, add(full, l, size, false))
		n--
	}
	for _, f := range []struct {
		rel  string
		l    lang
		size int
		p    int // percent of packages that have it
	}{
		{"package.json", langPkg, 500 + r.IntN(2500), 100},
		{"README.md", langMD, nodeSize(r, cum), 85},
		{"LICENSE", langLicense, 1200, 80},
		{"index.js", langJS, nodeSize(r, cum), 60},
	} {
		if n > 0 && r.IntN(100) < f.p && !pl.used[p.dir+"/"+f.rel] {
			put(f.rel, f.l, f.size)
		}
	}
	if n <= 0 {
		return
	}
	dirs := []string{""}
	depth := map[string]int{"": 0}
	for range n/12 + 1 {
		parent := dirs[r.IntN(len(dirs))]
		if r.IntN(3) > 0 {
			parent = dirs[len(dirs)-1]
		}
		if depth[parent] >= 5 {
			parent = ""
		}
		d := path.Join(parent, pick(r, nodeDirNames))
		if _, ok := depth[d]; ok {
			continue
		}
		depth[d] = depth[parent] + 1
		dirs = append(dirs, d)
	}
	w := weights(r, len(dirs))
	if len(dirs) > 1 { // the package root holds the fixed files only
		root := w[0]
		w, dirs = w[1:], dirs[1:]
		for i := range w {
			w[i] -= root
		}
	}
	for n > 0 {
		dir := dirs[weighted(r, w)]
		base := pick(r, words)
		if r.IntN(2) == 0 {
			base += "-" + pick(r, words)
		}
		join := func(ext string) string { return path.Join(dir, base+ext) }
		switch x := r.IntN(100); {
		case x < 44:
			put(join(".js"), langJS, nodeSize(r, cum))
			if n > 0 && r.IntN(3) == 0 {
				put(join(".js.map"), langMap, nodeSize(r, cum))
			}
		case x < 55:
			put(join(".js.map"), langMap, nodeSize(r, cum))
		case x < 77:
			put(join(".d.ts"), langDTS, nodeSize(r, cum))
		case x < 84:
			put(join(pick(r, []string{".mjs", ".cjs", ".mts", ".cts"})), langJS, nodeSize(r, cum))
		case x < 92:
			put(join(".json"), langJSON, nodeSize(r, cum))
		case x < 96:
			put(join(".md"), langMD, nodeSize(r, cum))
		default:
			put(join(""), langLicense, 1200)
		}
	}
}

// nodeText appends the content of a node_modules text file of about size
// bytes (never more) to g.b.
func (g *gen) nodeText(size int, shebang bool) {
	start := len(g.b)
	target := start + size
	switch g.lang {
	case langLicense:
		g.s("MIT License\n\nCopyright (c) ")
		g.b = strconv.AppendInt(g.b, int64(2012+g.r.IntN(14)), 10)
		g.c(' ')
		g.s(strings.ToUpper(g.word()[:1]))
		g.s(g.word()[1:])
		g.s(" contributors\n\n")
		g.s(mitText)
	case langPkg:
		g.pkgJSON(target)
	case langMap:
		g.sourceMap(target)
	default:
		save := g.lang
		g.lang = langTS
		if shebang {
			g.s("#!/usr/bin/env node\n")
		}
		if save == langJS {
			g.s("\"use strict\";\n")
		}
		g.tsHeader()
		for len(g.b) < target {
			if save == langDTS && g.r.IntN(3) > 0 {
				g.s("export declare function ")
				g.s(g.fname())
				g.s("(")
				g.s(g.id())
				g.s(": ")
				g.tsType()
				g.s("): ")
				g.tsType()
				g.s(";\n")
				continue
			}
			if save == langJS && g.r.IntN(2) == 0 {
				g.s(jsBoiler[g.r.IntN(len(jsBoiler))])
				g.s(g.id())
				g.s(";\n")
				continue
			}
			g.tsBlock()
		}
		g.lang = save
	}
	if len(g.b) > target {
		g.b = g.b[:target]
		if size > 0 {
			g.b[len(g.b)-1] = '\n'
		}
	}
}

// pkgJSON appends a package.json of about target-len(g.b) bytes.
func (g *gen) pkgJSON(target int) {
	g.s("{\n  \"name\": \"")
	g.s(g.word())
	g.s("\",\n  \"version\": \"")
	g.b = strconv.AppendInt(g.b, int64(g.r.IntN(12)), 10)
	g.c('.')
	g.b = strconv.AppendInt(g.b, int64(g.r.IntN(30)), 10)
	g.c('.')
	g.b = strconv.AppendInt(g.b, int64(g.r.IntN(20)), 10)
	g.s("\",\n  \"description\": \"")
	g.sentence()
	g.s("\",\n  \"main\": \"./dist/index.js\",\n  \"types\": \"./dist/index.d.ts\",\n  \"license\": \"MIT\",\n")
	g.s("  \"repository\": {\n    \"type\": \"git\",\n    \"url\": \"git+https://github.com/")
	g.s(g.word())
	g.c('/')
	g.s(g.word())
	g.s(".git\"\n  },\n  \"dependencies\": {\n")
	for i := 0; len(g.b) < target-40 || i == 0; i++ {
		if i > 0 {
			g.s(",\n")
		}
		g.s("    \"")
		g.s(g.word())
		g.s("\": \"^")
		g.b = strconv.AppendInt(g.b, int64(g.r.IntN(12)), 10)
		g.s(".")
		g.b = strconv.AppendInt(g.b, int64(g.r.IntN(30)), 10)
		g.s(".0\"")
	}
	g.s("\n  }\n}\n")
}

// vlq are common source-map segments; the rest are drawn from the base64
// alphabet.
var vlq = []string{"AAAA", "AAAA", "AACA", "AACA", "SAAS", "IAAI", "CAAC", "EAAE", "GAAG", "KAAK", "OAAO", "QAAQ", "MAAM", "UAAU", "YAAY", "cAAc", "gBAAgB", "kBAAkB", "oBAAoB", "AACE", "AADE", "AAEF", "CACA", "GACG"}

const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// sourceMap appends a source map: its header, then mappings.
func (g *gen) sourceMap(target int) {
	g.s("{\"version\":3,\"file\":\"")
	g.s(g.word())
	g.s(".js\",\"sources\":[\"../src/")
	g.s(g.word())
	g.s(".ts\"],\"names\":[")
	for i := range 3 + g.r.IntN(20) {
		if i > 0 {
			g.c(',')
		}
		g.c('"')
		g.s(g.id())
		g.c('"')
	}
	g.s("],\"mappings\":\"")
	for len(g.b) < target-2 {
		for range 1 + g.r.IntN(12) {
			if g.r.IntN(6) == 0 {
				for range 4 + 2*g.r.IntN(2) {
					g.c(b64[g.r.IntN(32)])
				}
			} else {
				g.s(vlq[g.r.IntN(len(vlq))])
			}
			g.c(',')
		}
		g.b[len(g.b)-1] = ';'
	}
	g.s("\"}")
}

// jsBoiler are the lines compiled and bundled JavaScript repeats; each
// is followed by an identifier.
var jsBoiler = []string{
	"Object.defineProperty(exports, \"__esModule\", { value: true });\nexports.",
	"var _interopRequireDefault = require(\"@babel/runtime/helpers/interopRequireDefault\");\nvar _",
	"function _interopRequireDefault(obj) { return obj && obj.__esModule ? obj : { default: obj }; }\nvar _",
	"  if (Object.prototype.hasOwnProperty.call(source, key)) {\n    target[key] = source[key];\n  }\n// ",
	"module.exports = ",
	"const { __awaiter, __generator } = require(\"tslib\");\nexports.",
	"  return typeof Symbol === \"function\" && typeof Symbol.iterator === \"symbol\" ? ",
	"/* istanbul ignore next */\nexport default ",
}

const mitText = `Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
`
