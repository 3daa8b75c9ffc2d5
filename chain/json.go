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

// object is a decoded JSON object whose members are still raw.
type object map[string]json.RawMessage

// parseObject decodes a JSON object. Text that is not JSON at all (NaN,
// Infinity, a syntax error) is INVALID_ENTRY whatever the member: no
// identifier can be read from it. A well-formed non-object is sentinel.
func parseObject(raw json.RawMessage, sentinel error, what string) (object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && !json.Valid(raw) {
		return nil, Errorf(ErrInvalidEntry, "%s is not valid JSON", what)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, Errorf(sentinel, "%s must be an object", what)
	}
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, Errorf(ErrInvalidEntry, "%s is not valid JSON: %v", what, err)
	}
	return o, nil
}

func (o object) has(name string) bool { _, ok := o[name]; return ok }

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// str decodes member name as a JSON string, keeping lone surrogates.
func (o object) str(name string) (string, bool) {
	raw, ok := o[name]
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
	raw, ok := o[name]
	if !ok || isNull(raw) {
		return "", nil
	}
	return o.id(name, field)
}

// integer reads a JSON number that must be an integer within ±(2^53−1).
func (o object) integer(name string) (int64, bool) {
	raw, ok := o[name]
	if !ok {
		return 0, false
	}
	return parseSafeInt(bytes.TrimSpace(raw))
}

func parseSafeInt(raw []byte) (int64, bool) {
	if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') || !json.Valid(raw) {
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

func parseCheckpointObject(raw json.RawMessage) (*checkpointObject, error) {
	o, err := parseObject(raw, ErrInvalidID, "checkpoint")
	if err != nil {
		return nil, err
	}
	return &checkpointObject{o: o}, nil
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

func (c *checkpointObject) content() error {
	o := c.o
	var ok bool
	if c.cp.CreatedAt, ok = o.integer("createdAt"); !ok {
		return Errorf(ErrInvalidEntry, "checkpoint createdAt must be an integer within ±(2^53−1)")
	}
	reason, _ := o.str("reason")
	c.cp.Reason = Reason(reason)
	for _, name := range []string{"label", "sourceRunId"} {
		if raw, present := o[name]; present && !isNull(raw) {
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
	var raws []json.RawMessage
	if err := rawArray(o["files"], &raws, "checkpoint files"); err != nil {
		return err
	}
	c.cp.Files = make([]Entry, len(raws))
	for i, r := range raws {
		if err := parseEntry(r, &c.cp.Files[i]); err != nil {
			return err
		}
	}
	if err := rawArray(o["artifacts"], &raws, "checkpoint artifacts"); err != nil {
		return err
	}
	c.cp.Artifacts = make([]Artifact, len(raws))
	for i, r := range raws {
		if err := parseArtifact(r, &c.cp.Artifacts[i]); err != nil {
			return err
		}
	}
	if err := rawArray(o["conversation"], &c.cp.Conversation, "checkpoint conversation"); err != nil {
		return err
	}
	return ValidateContent(&c.cp)
}

func rawArray(raw json.RawMessage, out *[]json.RawMessage, what string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return Errorf(ErrInvalidEntry, "%s must be an array", what)
	}
	*out = nil
	if err := json.Unmarshal(raw, out); err != nil {
		return Errorf(ErrInvalidEntry, "%s is not valid JSON: %v", what, err)
	}
	if *out == nil {
		*out = []json.RawMessage{}
	}
	return nil
}

func parseEntry(raw json.RawMessage, e *Entry) error {
	o, err := parseObject(raw, ErrInvalidEntry, "Checkpoint entry")
	if err != nil {
		return err
	}
	path, ok := o.str("path")
	if !ok {
		return Errorf(ErrInvalidEntry, "checkpoint entry path must be a string")
	}
	kind, _ := o.str("kind")
	*e = Entry{Path: path, Kind: Kind(kind)}
	if err := ValidatePath(path); err != nil {
		return err
	}
	// Presence, not value, decides: a dir carrying "size": 0 is as invalid
	// as one carrying a real size (SPEC §1.2 "own properties").
	for _, name := range foreignFields[e.Kind] {
		if o.has(name) {
			return Errorf(ErrInvalidEntry, "%s entry %q cannot have %s", e.Kind, path, name)
		}
	}
	switch e.Kind {
	case KindFile:
		if e.BlobKey, ok = o.str("blobKey"); !ok {
			return Errorf(ErrInvalidEntry, "checkpoint entry %q needs a string blobKey", path)
		}
		if e.Size, ok = o.integer("size"); !ok || e.Size < 0 {
			return Errorf(ErrInvalidEntry, "checkpoint entry %q needs a safe integer size >= 0", path)
		}
		if raw, present := o["executable"]; present {
			if err := json.Unmarshal(raw, &e.Executable); err != nil {
				return Errorf(ErrInvalidEntry, "checkpoint entry %q executable must be a boolean", path)
			}
		}
	case KindSymlink:
		if e.Target, ok = o.str("target"); !ok {
			return Errorf(ErrInvalidEntry, "symlink entry %q needs a string target", path)
		}
	}
	return nil
}

// foreignFields lists, per kind, the members an entry of that kind must not
// have at all. An unknown kind is left to ValidateFiles.
var foreignFields = map[Kind][]string{
	KindFile:    {"target"},
	KindDir:     {"blobKey", "size", "executable", "target"},
	KindSymlink: {"blobKey", "size", "executable"},
}

func parseArtifact(raw json.RawMessage, a *Artifact) error {
	bad := Errorf(ErrInvalidEntry, "Checkpoint artifact has invalid fields")
	o, err := parseObject(raw, ErrInvalidEntry, "Checkpoint artifact")
	if err != nil {
		return err
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
			return bad
		}
	}
	return nil
}

// ParseCheckpoint decodes a checkpoint from its JSON wire form and checks it
// in the contract's order: identifiers (INVALID_ID), then createdAt, reason,
// files, artifacts and conversation (INVALID_ENTRY).
func ParseCheckpoint(raw []byte) (*Checkpoint, error) {
	c, err := parseCheckpointObject(raw)
	if err != nil {
		return nil, err
	}
	if err := c.ids(); err != nil {
		return nil, err
	}
	if err := c.parent(); err != nil {
		return nil, err
	}
	if err := c.content(); err != nil {
		return nil, err
	}
	return &c.cp, nil
}

// ParseAppendInput decodes {"checkpoint", "expectedHeadId", "writer"} and
// checks it as append does before touching the store: all identifiers first
// (checkpoint id and thread, writer thread, expected head, parent), then the
// content.
func ParseAppendInput(raw []byte) (AppendInput, error) {
	var in AppendInput
	o, err := parseObject(raw, ErrInvalidID, "append input")
	if err != nil {
		return in, err
	}
	c, err := parseCheckpointObject(o["checkpoint"])
	if err != nil {
		return in, err
	}
	if err := c.ids(); err != nil {
		return in, err
	}
	if in.Writer, err = parseWriter(o["writer"]); err != nil {
		return in, err
	}
	if in.ExpectedHeadID, err = o.nullableID("expectedHeadId", "expectedHeadId"); err != nil {
		return in, err
	}
	if err := c.parent(); err != nil {
		return in, err
	}
	if err := c.content(); err != nil {
		return in, err
	}
	in.Checkpoint = &c.cp
	return in, nil
}

// parseWriter decodes {"threadId", "ownerToken", "fence"}. Only the thread id
// is an identifier; a token or fence of the wrong type can never match a
// lease, so it is WRITER_LOST.
func parseWriter(raw json.RawMessage) (Writer, error) {
	var w Writer
	o, err := parseObject(raw, ErrInvalidID, "writer")
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
