package chain

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is the strict JSON input path (CLI input, any future wire API).
// encoding/json alone is not enough: it replaces a lone "\uD800" escape and
// invalid UTF-8 with U+FFFD, accepts fractions for integers, and cannot tell
// an absent field from a zero one. Here a string keeps a lone surrogate as its
// WTF-8 bytes (which are invalid UTF-8), so the ordinary validators reject it
// with the contract's code, and every check runs in the contract's order.

// member is one member of a JSON object: its name, unescaped, and the
// text of its value without the whitespace around it.
type member struct {
	name  []byte
	value []byte
}

// object is a JSON object's members in the order written. A name given
// twice means its last value, as with encoding/json's map decoding.
type object []member

// get returns the value of member name (the last one of that name).
func (o object) get(name string) ([]byte, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if string(o[i].name) == name {
			return o[i].value, true
		}
	}
	return nil, false
}

// parseObject decodes a JSON object. Text that is not JSON at all (NaN,
// Infinity, a syntax error) is INVALID_ENTRY whatever the member: no
// identifier can be read from it. A well-formed non-object is sentinel.
// The text is validated here, once; the values inside it are read with
// nestedObject and nestedArray, which do not validate again.
func parseObject(raw []byte, sentinel error, what string) (object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && !validJSON(raw) {
		return nil, Errorf(ErrInvalidEntry, "%s is not valid JSON", what)
	}
	return nestedObject(raw, sentinel, what, nil)
}

// nestedObject decodes a member's value, the text of a JSON value inside a
// text parseObject validated, into scratch's memory: an absent member or a
// value that is not an object is sentinel.
func nestedObject(raw []byte, sentinel error, what string, scratch object) (object, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, Errorf(sentinel, "%s must be an object", what)
	}
	if scratch == nil {
		scratch = make(object, 0, 8)
	}
	o, ok := splitObject(raw, scratch[:0])
	if !ok {
		return nil, Errorf(ErrInvalidEntry, "%s is not valid JSON", what)
	}
	return o, nil
}

func (o object) has(name string) bool { _, ok := o.get(name); return ok }

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

// str decodes member name as a JSON string, keeping lone surrogates.
func (o object) str(name string) (string, bool) {
	raw, ok := o.get(name)
	if !ok {
		return "", false
	}
	return unquote(bytes.TrimSpace(raw))
}

// id reads a required identifier (INVALID_ID when absent, not a string, or
// invalid).
func (o object) id(name, field string) (string, error) {
	s, ok := o.str(name)
	if !ok {
		return "", Errorf(ErrInvalidID, "%s must be a string", field)
	}
	return s, CheckID(field, s)
}

// nullableID reads an identifier that may be null or absent ("" in Go); an
// empty string is INVALID_ID (SPEC §10 Q11).
func (o object) nullableID(name, field string) (string, error) {
	raw, ok := o.get(name)
	if !ok || isNull(raw) {
		return "", nil
	}
	return o.id(name, field)
}

// integer reads a JSON number that must be an integer within ±(2^53−1).
func (o object) integer(name string) (int64, bool) {
	raw, ok := o.get(name)
	if !ok {
		return 0, false
	}
	return parseSafeInt(bytes.TrimSpace(raw))
}

func parseSafeInt(raw []byte) (int64, bool) {
	if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') || !validJSON(raw) {
		return 0, false
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return n, n >= -MaxSafeInteger && n <= MaxSafeInteger
	}
	return exactInt(raw)
}

// exactInt reads a JSON number with a fraction or an exponent (1.0, 15e2,
// 1500e-3) as an integer when its decimal value is one, from the digits
// themselves: a float64 would round 1.0000000000000001 to 1 and 1e-400
// to 0, turning fractions into integers. raw is a valid JSON number.
func exactInt(raw []byte) (int64, bool) {
	neg := raw[0] == '-'
	if neg {
		raw = raw[1:]
	}
	mant, exp := raw, 0
	if i := bytes.IndexAny(raw, "eE"); i >= 0 {
		mant = raw[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(string(raw[i+1:]), "+"))
		if err != nil { // an exponent beyond int: only a zero is whole and safe
			return 0, isZeros(mant)
		}
		exp = e
	}
	digits := mant
	if i := bytes.IndexByte(mant, '.'); i >= 0 {
		frac := mant[i+1:]
		digits = append(append([]byte{}, mant[:i]...), frac...)
		exp -= len(frac)
	}
	digits = bytes.TrimLeft(digits, "0")
	if len(digits) == 0 {
		return 0, true // zero, however written
	}
	// The value is digits × 10^exp: whole when the digits dropped by a
	// negative exponent are all zeros.
	for exp < 0 && len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits, exp = digits[:len(digits)-1], exp+1
	}
	if exp < 0 || len(digits)+exp > 16 { // a fraction, or ≥ 10^16 > 2^53
		return 0, false
	}
	var n int64
	for _, d := range digits {
		n = n*10 + int64(d-'0')
	}
	for range exp {
		n *= 10
	}
	if n > MaxSafeInteger {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// isZeros reports whether a JSON mantissa (digits and maybe a point) is 0.
func isZeros(mant []byte) bool {
	return len(bytes.Trim(mant, "0.")) == 0
}

// checkpointObject holds a checkpoint's raw members between the two phases
// of checking: identifiers first, content second (SPEC §2.5 steps 1 and 2).
type checkpointObject struct {
	o  object
	cp Checkpoint
}

func (c *checkpointObject) ids() (err error) {
	if c.cp.ID, err = c.o.id("id", "checkpoint id"); err != nil {
		return err
	}
	if c.cp.ThreadID, err = c.o.id("threadId", "checkpoint threadId"); err != nil {
		return err
	}
	return nil
}

func (c *checkpointObject) parent() (err error) {
	c.cp.ParentID, err = c.o.nullableID("parentCheckpointId", "parentCheckpointId")
	return err
}

// content reads and checks everything but the identifiers. Each message is
// checked as the JSON value it is; spaced then gives each message the
// text of its element as written, the whitespace around the value
// included, sharing the input's memory, where otherwise the messages are a
// copy of the values alone.
func (c *checkpointObject) content(spaced bool) error {
	o := c.o
	var ok bool
	if c.cp.CreatedAt, ok = o.integer("createdAt"); !ok {
		return Errorf(ErrInvalidEntry, "checkpoint createdAt must be an integer within ±(2^53−1)")
	}
	reason, _ := o.str("reason")
	c.cp.Reason = Reason(reason)
	for _, name := range []string{"label", "sourceRunId"} {
		if raw, present := o.get(name); present && !isNull(raw) {
			s, ok := o.str(name)
			if !ok {
				return Errorf(ErrInvalidEntry, "checkpoint %s must be a string", name)
			}
			if name == "label" {
				c.cp.Label = s
			} else {
				c.cp.SourceRunID = s
			}
		}
	}
	var (
		elems   []json.RawMessage
		scratch object
		err     error
	)
	files, _ := o.get("files")
	if elems, err = nestedArray(files, elems, false, "checkpoint files"); err != nil {
		return err
	}
	c.cp.Files = make([]Entry, len(elems))
	for i, r := range elems {
		if scratch, err = parseEntry(r, &c.cp.Files[i], scratch); err != nil {
			return err
		}
	}
	artifacts, _ := o.get("artifacts")
	if elems, err = nestedArray(artifacts, elems, false, "checkpoint artifacts"); err != nil {
		return err
	}
	c.cp.Artifacts = make([]Artifact, len(elems))
	for i, r := range elems {
		if scratch, err = parseArtifact(r, &c.cp.Artifacts[i], scratch); err != nil {
			return err
		}
	}
	conversation, _ := o.get("conversation")
	written, err := nestedArray(conversation, nil, true, "checkpoint conversation")
	if err != nil {
		return err
	}
	c.cp.Conversation = values(written, !spaced)
	if err := ValidateContent(&c.cp); err != nil {
		return err
	}
	if spaced {
		c.cp.Conversation = written
	}
	return nil
}

// nestedArray returns, appended to dst[:0], the text of each element of a
// member's value, a JSON value inside a text parseObject validated: each
// value alone, or with spaced, each element as written, the bytes between
// '[' or ',' and the next ',' or ']' of the array's own level, whitespace
// around the value included. The elements share raw's memory but not its
// capacity. A value that is not an array is INVALID_ENTRY; an empty array
// gives an empty, non-nil slice.
func nestedArray(raw []byte, dst []json.RawMessage, spaced bool, what string) ([]json.RawMessage, error) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, Errorf(ErrInvalidEntry, "%s must be an array", what)
	}
	if dst == nil {
		dst = make([]json.RawMessage, 0, 16)
	}
	out, ok := splitArray(raw, dst[:0], spaced)
	if !ok {
		return nil, Errorf(ErrInvalidEntry, "%s is not valid JSON", what)
	}
	return out, nil
}

// values returns the JSON value of each element that nestedArray gave,
// without the whitespace around it: views of the elements' memory, or with
// copy, a copy of them all in one new allocation.
func values(elems []json.RawMessage, copy bool) []json.RawMessage {
	out := make([]json.RawMessage, len(elems))
	size := 0
	for i, m := range elems {
		out[i] = bytes.Trim(m, jsonSpace)
		size += len(out[i])
	}
	if !copy {
		return out
	}
	buf := make([]byte, 0, size)
	for i, m := range out {
		start := len(buf)
		buf = append(buf, m...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

func parseEntry(raw []byte, e *Entry, scratch object) (object, error) {
	o, err := nestedObject(raw, ErrInvalidEntry, "Checkpoint entry", scratch)
	if err != nil {
		return scratch, err
	}
	path, ok := o.str("path")
	if !ok {
		return o, Errorf(ErrInvalidEntry, "checkpoint entry path must be a string")
	}
	kind, _ := o.str("kind")
	*e = Entry{Path: path, Kind: Kind(kind)}
	if err := ValidatePath(path); err != nil {
		return o, err
	}
	// Presence, not value, decides: a dir carrying "size": 0 is as invalid
	// as one carrying a real size (SPEC §1.2 "own properties").
	for _, name := range foreignFields[e.Kind] {
		if o.has(name) {
			return o, Errorf(ErrInvalidEntry, "%s entry %q cannot have %s", e.Kind, path, name)
		}
	}
	switch e.Kind {
	case KindFile:
		if e.BlobKey, ok = o.str("blobKey"); !ok {
			return o, Errorf(ErrInvalidEntry, "checkpoint entry %q needs a string blobKey", path)
		}
		if e.Size, ok = o.integer("size"); !ok || e.Size < 0 {
			return o, Errorf(ErrInvalidEntry, "checkpoint entry %q needs a safe integer size >= 0", path)
		}
		if raw, present := o.get("executable"); present {
			// As encoding/json decodes a bool: null leaves it false.
			switch string(raw) {
			case "true":
				e.Executable = true
			case "false", "null":
			default:
				return o, Errorf(ErrInvalidEntry, "checkpoint entry %q executable must be a boolean", path)
			}
		}
	case KindSymlink:
		if e.Target, ok = o.str("target"); !ok {
			return o, Errorf(ErrInvalidEntry, "symlink entry %q needs a string target", path)
		}
	}
	return o, nil
}

// foreignFields lists, per kind, the members an entry of that kind must not
// have at all. An unknown kind is left to ValidateFiles.
var foreignFields = map[Kind][]string{
	KindFile:    {"target"},
	KindDir:     {"blobKey", "size", "executable", "target"},
	KindSymlink: {"blobKey", "size", "executable"},
}

func parseArtifact(raw []byte, a *Artifact, scratch object) (object, error) {
	bad := Errorf(ErrInvalidEntry, "Checkpoint artifact has invalid fields")
	o, err := nestedObject(raw, ErrInvalidEntry, "Checkpoint artifact", scratch)
	if err != nil {
		return scratch, err
	}
	var ok [6]bool
	a.ArtifactID, ok[0] = o.str("artifactId")
	a.Name, ok[1] = o.str("name")
	a.MimeType, ok[2] = o.str("mimeType")
	a.BlobKey, ok[3] = o.str("blobKey")
	a.Size, ok[4] = o.integer("size")
	a.CreatedAt, ok[5] = o.integer("createdAt")
	for _, b := range ok {
		if !b {
			return o, bad
		}
	}
	return o, nil
}

// ParseCheckpoint decodes the wire JSON, checking ids, then ValidateContent's.
func ParseCheckpoint(raw []byte) (*Checkpoint, error) {
	o, err := parseObject(raw, ErrInvalidID, "checkpoint")
	if err != nil {
		return nil, err
	}
	c := &checkpointObject{o: o}
	if err := c.ids(); err != nil {
		return nil, err
	}
	if err := c.parent(); err != nil {
		return nil, err
	}
	if err := c.content(false); err != nil {
		return nil, err
	}
	return &c.cp, nil
}

// ParseAppendInput decodes {"checkpoint", "expectedHeadId", "writer"} and
// checks it as ValidateAppend does; each message is a copy of its value.
func ParseAppendInput(raw []byte) (AppendInput, error) { return parseAppendInput(raw, false) }

// ParseAppendInputExact is ParseAppendInput, but each message is its text in
// raw, surrounding whitespace included, sharing raw's memory.
func ParseAppendInputExact(raw []byte) (AppendInput, error) {
	// That text is the bytes between the array's '[' or ',' and the next ','
	// or ']'; the checks are ParseAppendInput's, on the values. It serves a
	// store that keeps each message byte for byte as a request wrote it.
	return parseAppendInput(raw, true)
}

func parseAppendInput(raw []byte, spaced bool) (AppendInput, error) {
	var in AppendInput
	o, err := parseObject(raw, ErrInvalidID, "append input")
	if err != nil {
		return in, err
	}
	member, _ := o.get("checkpoint")
	co, err := nestedObject(member, ErrInvalidID, "checkpoint", nil)
	if err != nil {
		return in, err
	}
	c := &checkpointObject{o: co}
	if err := c.ids(); err != nil {
		return in, err
	}
	member, _ = o.get("writer")
	if in.Writer, err = parseWriter(member); err != nil {
		return in, err
	}
	if in.ExpectedHeadID, err = o.nullableID("expectedHeadId", "expectedHeadId"); err != nil {
		return in, err
	}
	if err := c.parent(); err != nil {
		return in, err
	}
	if err := c.content(spaced); err != nil {
		return in, err
	}
	in.Checkpoint = &c.cp
	return in, nil
}

// parseWriter decodes {"threadId", "ownerToken", "fence"}, a member's value
// inside a text parseObject validated. Only the thread id is an
// identifier; a token or fence of the wrong type can never match a lease,
// so it is WRITER_LOST.
func parseWriter(raw []byte) (Writer, error) {
	var w Writer
	o, err := nestedObject(raw, ErrInvalidID, "writer", nil)
	if err != nil {
		return w, err
	}
	if w.ThreadID, err = o.id("threadId", "writer threadId"); err != nil {
		return w, err
	}
	tok, ok1 := o.str("ownerToken")
	fence, ok2 := o.integer("fence")
	if !ok1 || !ok2 || fence < 0 {
		return w, Errorf(ErrWriterLost, "writer for thread %q has no valid ownerToken and fence", w.ThreadID)
	}
	w.OwnerToken, w.Fence = tok, uint64(fence)
	return w, nil
}

// jsonSpace is JSON's whitespace (RFC 8259 §2).
const jsonSpace = " \t\n\r"

// skipSpace returns the index of the first byte of b at or after i that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// The splitters below read text that validJSON accepted, once, so they
// only find where each value ends: a string at its closing quote (the
// first '"' after an even run of backslashes), an object or array at the
// bracket that brings its depth back, strings skipped whole. Each byte is
// looked at a constant number of times. Given text that is not valid
// JSON they return false, never panic.

// endOfString returns the index just past the string literal whose
// opening quote is b[i], or -1.
func endOfString(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
	return -1
}

// endOfValue returns the index just past the JSON value that starts at
// b[i], or -1.
func endOfValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return endOfString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				if j = endOfString(b, j); j < 0 {
					return -1
				}
				j-- // the loop steps past the closing quote
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default: // a number, true, false or null
		j := i
		for j < len(b) && b[j] != ',' && b[j] != ']' && b[j] != '}' && b[j] != ':' &&
			b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

// splitObject appends the members of the JSON object b (its text, '{'
// first, '}' last) to dst. A member's name is unescaped when it holds an
// escape; one that unquote refuses (invalid UTF-8) is left empty, which
// names no member anything looks for, as encoding/json's U+FFFD
// replacement does not either.
func splitObject(b []byte, dst object) (object, bool) {
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == '}' {
		return dst, true
	}
	for i < len(b) && b[i] == '"' {
		end := endOfString(b, i)
		if end < 0 {
			return nil, false
		}
		name := b[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			s, _ := unquote(b[i:end])
			name = []byte(s)
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		vend := endOfValue(b, i)
		if vend < 0 {
			return nil, false
		}
		dst = append(dst, member{name: name, value: b[i:vend:vend]})
		i = skipSpace(b, vend)
		switch {
		case i < len(b) && b[i] == ',':
			i = skipSpace(b, i+1)
		case i < len(b) && b[i] == '}':
			return dst, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// splitArray appends the elements of the JSON array b (its text, '['
// first, ']' last) to dst: each value, or with spaced, each element as
// written (see nestedArray).
func splitArray(b []byte, dst []json.RawMessage, spaced bool) ([]json.RawMessage, bool) {
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == ']' {
		return dst, true
	}
	for start := 1; ; {
		vend := endOfValue(b, i)
		if vend < 0 {
			return nil, false
		}
		j := skipSpace(b, vend)
		if j >= len(b) {
			return nil, false
		}
		if spaced {
			dst = append(dst, b[start:j:j])
		} else {
			dst = append(dst, b[i:vend:vend])
		}
		switch b[j] {
		case ',':
			start = j + 1
			i = skipSpace(b, start)
		case ']':
			return dst, true
		default:
			return nil, false
		}
	}
}

// unquote decodes a JSON string literal. Unlike encoding/json it keeps a lone
// UTF-16 surrogate escape as its three WTF-8 bytes and leaves invalid UTF-8
// bytes as they are, so the result is invalid UTF-8 exactly when the input
// was not well-formed Unicode.
func unquote(lit []byte) (string, bool) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", false
	}
	lit = lit[1 : len(lit)-1]
	// JSON text is UTF-8 (RFC 8259). A string with raw invalid bytes is
	// refused: it could not be written back out as it came (only escaped
	// lone surrogates can, see wireString). Conversation messages are not
	// strings here: they are kept as raw JSON, byte for byte.
	if !utf8.Valid(lit) {
		return "", false
	}
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit), !bytes.ContainsAny(lit, "\"") && noControl(lit)
	}
	out := make([]byte, 0, len(lit))
	for i := 0; i < len(lit); {
		c := lit[i]
		if c == '"' || c < 0x20 {
			return "", false
		}
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(lit) {
			return "", false
		}
		switch lit[i+1] {
		case '"', '\\', '/':
			out = append(out, lit[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(lit[i+2:])
			if !ok {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if r < 0xDC00 && i+1 < len(lit) && lit[i] == '\\' && lit[i+1] == 'u' {
					if r2, ok := hex4(lit[i+2:]); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
						out = utf8.AppendRune(out, utf16.DecodeRune(r, r2))
						i += 6
						continue
					}
				}
				// A lone surrogate: its WTF-8 form, invalid as UTF-8.
				out = append(out, byte(0xE0|r>>12), byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
				continue
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	return string(out), true
}

func noControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return false
		}
	}
	return true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(n), err == nil
}
