package workload

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
)

// content appends the bytes of e to b.
func (e *entry) content(b []byte) []byte {
	r := newRand(e.seed)
	switch e.kind {
	case kindEmpty:
		return b
	case kindBinary:
		return binaryContent(b, e.size, r, 5)
	case kindNative:
		return binaryContent(b, e.size, r, 4)
	}
	g := newGen(r, e.lang, b)
	if e.node {
		g.nodeText(e.size, e.shebang)
		return g.b
	}
	g.file(e.size, e.shebang)
	return g.b
}

// binaryContent appends size bytes made of 64 KiB chunks: about random in
// 10 of them random (incompressible), the others a short random pattern repeated or
// low-entropy little-endian counters, like model weights, images and
// tables mixed.
func binaryContent(b []byte, size int, r *rand.Rand, random int) []byte {
	const chunk = 64 << 10
	start := len(b)
	b = append(b, make([]byte, size)...)
	out := b[start:]
	for off := 0; off < size; off += chunk {
		c := out[off:min(off+chunk, size)]
		switch x := r.IntN(10); {
		case x < random:
			fillRandom(c, r)
		case x < 8:
			pat := make([]byte, 16+r.IntN(4081))
			fillRandom(pat, r)
			for i := 0; i < len(c); i += copy(c[i:], pat) {
			}
		default:
			v, step := r.Uint32()&0xffff, uint32(1+r.IntN(7))
			for i := 0; i+4 <= len(c); i += 4 {
				binary.LittleEndian.PutUint32(c[i:], v)
				v += step
				if r.IntN(16) == 0 {
					v ^= r.Uint32() & 0xff
				}
			}
		}
	}
	return b
}

func fillRandom(c []byte, r *rand.Rand) {
	i := 0
	for ; i+8 <= len(c); i += 8 {
		binary.LittleEndian.PutUint64(c[i:], r.Uint64())
	}
	for ; i < len(c); i++ {
		c[i] = byte(r.Uint32())
	}
}

// gen writes plausible text of one language into b.
type gen struct {
	r     *rand.Rand
	lang  lang
	b     []byte
	ids   []string // the file's local identifiers (camelCase or snake_case)
	types []string // the file's type names (PascalCase)
	topic []string // the file's favourite words
}

func newGen(r *rand.Rand, l lang, b []byte) *gen {
	g := &gen{r: r, lang: l, b: b}
	for range 16 + r.IntN(16) {
		g.topic = append(g.topic, g.word())
	}
	n := 12 + r.IntN(20)
	for range n {
		g.ids = append(g.ids, g.freshID())
	}
	for range 3 + r.IntN(6) {
		g.types = append(g.types, g.freshType())
	}
	return g
}

func (g *gen) s(x string) { g.b = append(g.b, x...) }
func (g *gen) c(x byte)   { g.b = append(g.b, x) }

// word returns a vocabulary word, half the time one of the file's topic
// words: real files keep coming back to a few terms.
func (g *gen) word() string {
	if len(g.topic) > 0 && g.r.IntN(2) == 0 {
		return g.topic[g.r.IntN(len(g.topic))]
	}
	return words[g.r.IntN(len(words))]
}

// freshID builds a new identifier of one to three words.
func (g *gen) freshID() string {
	n := 1 + g.r.IntN(3)
	var b []byte
	for i := range n {
		w := g.word()
		switch {
		case i == 0:
			b = append(b, w...)
		case g.lang == langPy || g.lang == langSh:
			b = append(b, '_')
			b = append(b, w...)
		default:
			b = append(b, w[0]-'a'+'A')
			b = append(b, w[1:]...)
		}
	}
	return string(b)
}

func (g *gen) freshType() string {
	n := 1 + g.r.IntN(2)
	var b []byte
	for range n {
		w := g.word()
		b = append(b, w[0]-'a'+'A')
		b = append(b, w[1:]...)
	}
	return string(b)
}

// id returns a local identifier, now and then a fresh one.
func (g *gen) id() string {
	if g.r.IntN(16) == 0 {
		return g.freshID()
	}
	return g.ids[g.r.IntN(len(g.ids))]
}

func (g *gen) typ() string {
	if g.r.IntN(20) == 0 {
		return g.freshType()
	}
	return g.types[g.r.IntN(len(g.types))]
}

// fname returns a function name in the language's style.
func (g *gen) fname() string {
	v := verbs[g.r.IntN(len(verbs))]
	t := g.typ()
	switch g.lang {
	case langPy, langSh:
		return v + "_" + lowerSnake(t)
	case langGo:
		if g.r.IntN(2) == 0 {
			return string(v[0]-'a'+'A') + v[1:] + t
		}
	}
	return v + t
}

func lowerSnake(t string) string {
	var b []byte
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b = append(b, '_')
			}
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}

func (g *gen) num() {
	switch x := g.r.IntN(10); {
	case x < 5:
		g.b = strconv.AppendInt(g.b, int64(g.r.IntN(16)), 10)
	case x < 8:
		g.b = strconv.AppendInt(g.b, int64(g.r.IntN(1000)), 10)
	default:
		g.b = strconv.AppendInt(g.b, int64(g.r.IntN(1<<20)), 10)
	}
}

// words appends n words separated by spaces.
func (g *gen) words(n int) {
	for i := range n {
		if i > 0 {
			g.c(' ')
		}
		g.s(g.word())
	}
}

// sentence appends a capitalised sentence of 5–16 words and a period.
func (g *gen) sentence() {
	start := len(g.b)
	g.words(5 + g.r.IntN(12))
	if c := g.b[start]; c >= 'a' && c <= 'z' {
		g.b[start] = c - 'a' + 'A'
	}
	g.c('.')
}

// indent appends the indentation of nesting depth d.
func (g *gen) indent(d int) {
	for range d {
		switch g.lang {
		case langGo:
			g.c('\t')
		case langPy:
			g.s("    ")
		default:
			g.s("  ")
		}
	}
}

// comment appends one comment line; the caller has indented it.
func (g *gen) comment() {
	switch g.lang {
	case langPy, langSh:
		g.s("# ")
	default:
		g.s("// ")
	}
	g.sentence()
	g.c('\n')
}

// file appends a whole file of about size bytes (it ends at the first
// block boundary past size).
func (g *gen) file(size int, shebang bool) {
	start := len(g.b)
	target := start + size
	switch g.lang {
	case langGo:
		g.goHeader()
	case langTS:
		g.tsHeader()
	case langPy:
		if shebang {
			g.s("#!/usr/bin/env python3\n")
		}
		g.pyHeader()
	case langSh:
		g.s("#!/usr/bin/env bash\nset -euo pipefail\n\n")
		g.comment()
		g.c('\n')
	case langMD:
		g.s("# ")
		g.words(2 + g.r.IntN(4))
		g.s("\n\n")
	case langJSON:
		g.s("{\n  \"name\": \"")
		g.s(g.word())
		g.c('-')
		g.s(g.word())
		g.s("\",\n  \"version\": ")
		g.num()
		g.s(",\n  \"items\": [\n")
	}
	for first := true; len(g.b) < target || first; first = false {
		switch g.lang {
		case langGo:
			g.goBlock()
		case langTS:
			g.tsBlock()
		case langPy:
			g.pyBlock()
		case langSh:
			g.shBlock()
		case langMD:
			g.mdBlock()
		case langJSON:
			if !first {
				g.s(",\n")
			}
			g.jsonItem(2)
		default:
			g.sentence()
			g.c('\n')
		}
	}
	switch g.lang {
	case langJSON:
		g.s("\n  ]\n}\n")
	case langSh:
		g.s("main \"$@\"\n")
	}
}

// lines appends about n bytes of statements at depth d, for Edit.
func (g *gen) lines(n, d int) {
	target := len(g.b) + n
	for len(g.b) < target {
		switch g.lang {
		case langGo, langTS, langPy, langSh:
			g.stmt(d, 2)
		case langJSON:
			g.indent(d)
			g.c('"')
			g.s(g.id())
			g.s("\": ")
			g.num()
			g.s(",\n")
		default:
			g.sentence()
			g.c('\n')
		}
	}
}

// stmts appends n statements at depth d (nesting allowed while depth < max).
func (g *gen) stmts(d, n, maxDepth int) {
	for range n {
		g.stmt(d, maxDepth)
	}
}

// stmt appends one statement (possibly a nested block) at depth d.
func (g *gen) stmt(d, maxDepth int) {
	x := g.r.IntN(100)
	if d >= maxDepth && x >= 70 && x < 85 {
		x = 0
	}
	g.indent(d)
	switch g.lang {
	case langGo:
		g.goStmt(d, x, maxDepth)
	case langTS:
		g.tsStmt(d, x, maxDepth)
	case langPy:
		g.pyStmt(d, x, maxDepth)
	case langSh:
		g.shStmt(d, x, maxDepth)
	}
}

func (g *gen) args(n int) {
	for i := range n {
		if i > 0 {
			g.s(", ")
		}
		if g.r.IntN(5) == 0 {
			g.num()
		} else {
			g.s(g.id())
		}
	}
}

// params appends n distinct-looking parameter names.
func (g *gen) params(n int) {
	for i := range n {
		if i > 0 {
			g.s(", ")
		}
		g.s(g.id())
	}
}

// ---- Go ----

var goImports = []string{
	"context", "errors", "fmt", "io", "os", "sort", "strconv", "strings", "sync", "time",
	"encoding/json", "net/http", "path/filepath", "bytes", "log/slog",
}

func (g *gen) goHeader() {
	g.s("// Package ")
	pkg := g.word()
	g.s(pkg)
	g.c(' ')
	g.words(6 + g.r.IntN(8))
	g.s(".\npackage ")
	g.s(pkg)
	g.s("\n\nimport (\n")
	n := 2 + g.r.IntN(5)
	start := g.r.IntN(len(goImports))
	for i := range n {
		g.s("\t\"")
		g.s(goImports[(start+i)%len(goImports)])
		g.s("\"\n")
	}
	g.s(")\n\n")
}

func (g *gen) goBlock() {
	switch x := g.r.IntN(100); {
	case x < 60:
		name := g.fname()
		g.s("// ")
		g.s(name)
		g.c(' ')
		g.sentence()
		g.s("\nfunc ")
		if x < 25 {
			g.s("(")
			g.s(string(g.word()[0]))
			g.s(" *")
			g.s(g.typ())
			g.s(") ")
		}
		g.s(name)
		g.c('(')
		for i := range g.r.IntN(4) {
			if i > 0 {
				g.s(", ")
			}
			g.s(g.id())
			g.c(' ')
			g.goType()
		}
		g.s(") (")
		g.goType()
		g.s(", error) {\n")
		g.stmts(1, 3+g.r.IntN(10), 3)
		g.s("\treturn ")
		g.s(g.id())
		g.s(", nil\n}\n\n")
	case x < 80:
		g.s("// ")
		t := g.typ()
		g.s(t)
		g.c(' ')
		g.sentence()
		g.s("\ntype ")
		g.s(t)
		g.s(" struct {\n")
		for range 2 + g.r.IntN(8) {
			g.c('\t')
			f := g.id()
			g.c(f[0] - 'a' + 'A')
			g.s(f[1:])
			g.c(' ')
			g.goType()
			if g.r.IntN(3) == 0 {
				g.s(" `json:\"")
				g.s(f)
				g.s(",omitempty\"`")
			}
			g.c('\n')
		}
		g.s("}\n\n")
	case x < 90:
		g.s("const (\n")
		for range 2 + g.r.IntN(6) {
			g.c('\t')
			g.s(g.fname())
			g.s(" = ")
			g.num()
			g.c('\n')
		}
		g.s(")\n\n")
	default:
		g.s("var ")
		g.s(g.id())
		g.s(" = errors.New(\"")
		g.words(3 + g.r.IntN(4))
		g.s("\")\n\n")
	}
}

var goTypes = []string{"string", "int", "int64", "bool", "[]byte", "error", "time.Duration", "context.Context", "[]string", "map[string]int"}

func (g *gen) goType() {
	switch x := g.r.IntN(10); {
	case x < 5:
		g.s(goTypes[g.r.IntN(len(goTypes))])
	case x < 8:
		g.c('*')
		g.s(g.typ())
	default:
		g.s("[]")
		g.s(g.typ())
	}
}

func (g *gen) goStmt(d, x, maxDepth int) {
	switch {
	case x < 25:
		g.s(g.id())
		g.s(", err := ")
		g.s(g.id())
		g.c('.')
		g.s(g.fname())
		g.c('(')
		g.args(g.r.IntN(4))
		g.s(")\n")
		g.indent(d)
		g.s("if err != nil {\n")
		g.indent(d + 1)
		g.s("return nil, fmt.Errorf(\"")
		g.words(2 + g.r.IntN(3))
		g.s(": %w\", err)\n")
		g.indent(d)
		g.s("}\n")
	case x < 40:
		g.s(g.id())
		g.s(" := ")
		g.s(g.id())
		g.c('.')
		g.s(g.fname())
		g.c('(')
		g.args(g.r.IntN(3))
		g.s(")\n")
	case x < 50:
		g.s(g.id())
		g.s(" = append(")
		g.s(g.id())
		g.s(", ")
		g.s(g.id())
		g.s(")\n")
	case x < 60:
		g.comment()
	case x < 70:
		g.s("slog.Info(\"")
		g.words(2 + g.r.IntN(4))
		g.s("\", \"")
		g.s(g.word())
		g.s("\", ")
		g.s(g.id())
		g.s(")\n")
	case x < 78:
		g.s("for _, ")
		g.s(g.id())
		g.s(" := range ")
		g.s(g.id())
		g.s(" {\n")
		g.stmts(d+1, 1+g.r.IntN(3), maxDepth)
		g.indent(d)
		g.s("}\n")
	case x < 85:
		g.s("if ")
		g.s(g.id())
		g.s(" > ")
		g.num()
		g.s(" {\n")
		g.stmts(d+1, 1+g.r.IntN(3), maxDepth)
		g.indent(d)
		g.s("}\n")
	default:
		g.s(g.id())
		g.c('.')
		f := g.id()
		g.c(f[0] - 'a' + 'A')
		g.s(f[1:])
		g.s(" = ")
		g.s(g.id())
		g.c('\n')
	}
}

// ---- TypeScript ----

func (g *gen) tsHeader() {
	for range 1 + g.r.IntN(5) {
		g.s("import { ")
		g.s(g.typ())
		g.s(", ")
		g.s(g.typ())
		g.s(" } from \"../")
		g.s(g.word())
		g.c('/')
		g.s(g.word())
		g.s("\";\n")
	}
	g.c('\n')
}

func (g *gen) tsBlock() {
	switch x := g.r.IntN(100); {
	case x < 55:
		g.s("/** ")
		g.sentence()
		g.s(" */\nexport ")
		if x < 25 {
			g.s("async ")
		}
		g.s("function ")
		g.s(g.fname())
		g.c('(')
		for i := range g.r.IntN(4) {
			if i > 0 {
				g.s(", ")
			}
			g.s(g.id())
			g.s(": ")
			g.tsType()
		}
		g.s("): ")
		if x < 25 {
			g.s("Promise<")
			g.tsType()
			g.c('>')
		} else {
			g.tsType()
		}
		g.s(" {\n")
		g.stmts(1, 3+g.r.IntN(10), 3)
		g.s("  return ")
		g.s(g.id())
		g.s(";\n}\n\n")
	case x < 80:
		g.s("export interface ")
		g.s(g.typ())
		g.s(" {\n")
		for range 2 + g.r.IntN(8) {
			g.s("  ")
			g.s(g.id())
			if g.r.IntN(3) == 0 {
				g.c('?')
			}
			g.s(": ")
			g.tsType()
			g.s(";\n")
		}
		g.s("}\n\n")
	default:
		g.s("export const ")
		g.s(g.id())
		g.s(" = ")
		g.num()
		g.s(";\n\n")
	}
}

var tsTypes = []string{"string", "number", "boolean", "string[]", "unknown", "Record<string, number>", "void", "Date"}

func (g *gen) tsType() {
	if g.r.IntN(2) == 0 {
		g.s(tsTypes[g.r.IntN(len(tsTypes))])
	} else {
		g.s(g.typ())
	}
}

func (g *gen) tsStmt(d, x, maxDepth int) {
	switch {
	case x < 30:
		g.s("const ")
		g.s(g.id())
		g.s(" = ")
		if x < 12 {
			g.s("await ")
		}
		g.s(g.id())
		g.c('.')
		g.s(g.fname())
		g.c('(')
		g.args(g.r.IntN(4))
		g.s(");\n")
	case x < 45:
		g.s("if (!")
		g.s(g.id())
		g.s(") {\n")
		g.indent(d + 1)
		g.s("throw new Error(\"")
		g.words(2 + g.r.IntN(4))
		g.s("\");\n")
		g.indent(d)
		g.s("}\n")
	case x < 55:
		g.comment()
	case x < 70:
		g.s("logger.debug(`")
		g.words(2 + g.r.IntN(3))
		g.s(" ${")
		g.s(g.id())
		g.s("}`);\n")
	case x < 78:
		g.s("for (const ")
		g.s(g.id())
		g.s(" of ")
		g.s(g.id())
		g.s(") {\n")
		g.stmts(d+1, 1+g.r.IntN(3), maxDepth)
		g.indent(d)
		g.s("}\n")
	case x < 85:
		g.s("if (")
		g.s(g.id())
		g.s(".length > ")
		g.num()
		g.s(") {\n")
		g.stmts(d+1, 1+g.r.IntN(3), maxDepth)
		g.indent(d)
		g.s("}\n")
	default:
		g.s(g.id())
		g.c('.')
		g.s(g.id())
		g.s(" = ")
		g.s(g.id())
		g.s(";\n")
	}
}

// ---- Python ----

var pyImports = []string{"os", "sys", "json", "logging", "re", "time", "typing", "dataclasses", "pathlib", "itertools"}

func (g *gen) pyHeader() {
	g.s("\"\"\"")
	g.sentence()
	g.s("\"\"\"\n\n")
	for range 2 + g.r.IntN(4) {
		g.s("import ")
		g.s(pyImports[g.r.IntN(len(pyImports))])
		g.c('\n')
	}
	g.c('\n')
}

func (g *gen) pyBlock() {
	switch x := g.r.IntN(100); {
	case x < 55:
		g.s("\ndef ")
		g.pyDef(0)
	case x < 85:
		g.s("\nclass ")
		g.s(g.typ())
		g.s(":\n    \"\"\"")
		g.sentence()
		g.s("\"\"\"\n")
		for range 1 + g.r.IntN(3) {
			g.s("\n    def ")
			g.pyDef(1)
		}
	default:
		g.s(lowerSnake(g.typ()))
		g.s(" = ")
		g.num()
		g.c('\n')
	}
}

func (g *gen) pyDef(d int) {
	g.s(g.fname())
	g.c('(')
	n := g.r.IntN(4)
	if d > 0 {
		g.s("self")
		if n > 0 {
			g.s(", ")
		}
	}
	g.params(n)
	g.s("):\n")
	g.indent(d + 1)
	g.s("\"\"\"")
	g.sentence()
	g.s("\"\"\"\n")
	g.stmts(d+1, 2+g.r.IntN(9), d+3)
	g.indent(d + 1)
	g.s("return ")
	g.s(g.id())
	g.c('\n')
}

func (g *gen) pyStmt(d, x, maxDepth int) {
	switch {
	case x < 30:
		g.s(g.id())
		g.s(" = ")
		if x < 10 {
			g.s("self.")
		}
		g.s(g.id())
		g.c('.')
		g.s(g.fname())
		g.c('(')
		g.args(g.r.IntN(4))
		g.s(")\n")
	case x < 45:
		g.s("if not ")
		g.s(g.id())
		g.s(":\n")
		g.indent(d + 1)
		g.s("raise ValueError(\"")
		g.words(2 + g.r.IntN(4))
		g.s("\")\n")
	case x < 55:
		g.comment()
	case x < 70:
		g.s("logger.info(\"")
		g.words(2 + g.r.IntN(3))
		g.s(" %s\", ")
		g.s(g.id())
		g.s(")\n")
	case x < 78:
		g.s("for ")
		g.s(g.id())
		g.s(" in ")
		g.s(g.id())
		g.s(":\n")
		g.stmts(d+1, 1+g.r.IntN(3), maxDepth)
	case x < 85:
		g.s("if len(")
		g.s(g.id())
		g.s(") > ")
		g.num()
		g.s(":\n")
		g.stmts(d+1, 1+g.r.IntN(3), maxDepth)
	default:
		g.s(g.id())
		g.s(".append(")
		g.s(g.id())
		g.s(")\n")
	}
}

// ---- shell ----

func (g *gen) shBlock() {
	g.s(g.fname())
	g.s("() {\n  local ")
	g.s(g.id())
	g.s("=\"${1:-")
	g.s(g.word())
	g.s("}\"\n")
	g.stmts(1, 2+g.r.IntN(8), 2)
	g.s("}\n\n")
}

var shCmds = []string{"go test ./...", "npm run build", "python3 -m pytest -q", "docker build -t", "git diff --stat", "rsync -a", "make", "curl -fsSL"}

func (g *gen) shStmt(d, x, maxDepth int) {
	switch {
	case x < 30:
		g.s("echo \"")
		g.words(2 + g.r.IntN(4))
		g.s(" ${")
		g.s(g.id())
		g.s("}\"\n")
	case x < 50:
		g.s(shCmds[g.r.IntN(len(shCmds))])
		g.c(' ')
		g.s(g.word())
		g.c('/')
		g.s(g.word())
		g.c('\n')
	case x < 60:
		g.comment()
	case x < 70:
		g.s(g.id())
		g.s("=\"$(")
		g.s(g.fname())
		g.s(" \"$")
		g.s(g.id())
		g.s("\")\"\n")
	case x < 85:
		g.s("if [[ -z \"${")
		g.s(g.id())
		g.s(":-}\" ]]; then\n")
		g.stmts(d+1, 1+g.r.IntN(2), maxDepth)
		g.indent(d)
		g.s("fi\n")
	default:
		g.s("export ")
		g.s(lowerSnake(g.typ()))
		g.s("=")
		g.num()
		g.c('\n')
	}
}

// ---- Markdown and JSON ----

func (g *gen) mdBlock() {
	switch x := g.r.IntN(100); {
	case x < 50:
		for range 2 + g.r.IntN(5) {
			g.sentence()
			g.c(' ')
		}
		g.b[len(g.b)-1] = '\n'
		g.c('\n')
	case x < 65:
		g.s("## ")
		g.words(2 + g.r.IntN(4))
		g.s("\n\n")
	case x < 85:
		for range 2 + g.r.IntN(5) {
			g.s("- ")
			g.words(3 + g.r.IntN(8))
			g.c('\n')
		}
		g.c('\n')
	default:
		g.s("```go\n")
		save := g.lang
		g.lang = langGo
		g.stmts(0, 2+g.r.IntN(4), 1)
		g.lang = save
		g.s("```\n\n")
	}
}

func (g *gen) jsonItem(d int) {
	ind := func(n int) {
		for range n {
			g.s("  ")
		}
	}
	ind(d)
	g.s("{\n")
	n := 3 + g.r.IntN(6)
	for i := range n {
		ind(d + 1)
		g.c('"')
		g.s(g.id())
		g.s("\": ")
		switch g.r.IntN(5) {
		case 0, 1:
			g.num()
		case 2:
			g.c('"')
			g.words(1 + g.r.IntN(4))
			g.c('"')
		case 3:
			if g.r.IntN(2) == 0 {
				g.s("true")
			} else {
				g.s("false")
			}
		default:
			g.s("[\"")
			g.s(g.word())
			g.s("\", \"")
			g.s(g.word())
			g.s("\"]")
		}
		if i < n-1 {
			g.c(',')
		}
		g.c('\n')
	}
	ind(d)
	g.c('}')
}

// editContent appends to b the edited version of old: one to four lines
// replaced by new statements and, in about 60 % of files, a block of
// 200 B–2 KB appended. The result always differs from old.
func editContent(b, old []byte, l lang, r *rand.Rand) []byte {
	g := newGen(r, l, b)
	depth := 1
	if l == langMD || l == langTxt {
		depth = 0
	}
	lines := bytes.SplitAfter(old, []byte("\n"))
	if len(old) == 0 {
		lines = nil
	}
	replace := map[int]bool{}
	if len(lines) > 0 {
		for range 1 + r.IntN(4) {
			replace[r.IntN(len(lines))] = true
		}
	}
	appendBlock := len(lines) == 0 || r.IntN(10) < 6
	for i, ln := range lines {
		if replace[i] {
			g.lines(40+r.IntN(120), depth)
			continue
		}
		g.b = append(g.b, ln...)
	}
	if appendBlock || bytes.Equal(g.b[len(b):], old) {
		if n := len(g.b); n > len(b) && g.b[n-1] != '\n' {
			g.c('\n')
		}
		g.lines(200+r.IntN(1800), depth)
	}
	return g.b
}
