package chain

import (
	"bytes"
	"encoding/json"
)

// The strict JSON path as it was first written, on encoding/json's map
// decoding: the reference that the differential tests hold json.go to.

// refObject is a decoded JSON refObject whose members are still raw.
type refObject map[string]json.RawMessage

// refParseObject decodes a JSON refObject. Text that is not JSON at all (NaN,
// Infinity, a syntax error) is INVALID_ENTRY whatever the member: no
// identifier can be read from it. A well-formed non-refObject is sentinel.
func refParseObject(raw json.RawMessage, sentinel error, what string) (refObject, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && !json.Valid(raw) {
		return nil, Errorf(ErrInvalidEntry, "%s is not valid JSON", what)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, Errorf(sentinel, "%s must be an object", what)
	}
	var o refObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, Errorf(ErrInvalidEntry, "%s is not valid JSON: %v", what, err)
	}
	return o, nil
}

func (o refObject) has(name string) bool { _, ok := o[name]; return ok }

func refIsNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// str decodes member name as a JSON string, keeping lone surrogates.
func (o refObject) str(name string) (string, bool) {
	raw, ok := o[name]
	if !ok {
		return "", false
	}
	return unquote(bytes.TrimSpace(raw))
}

// id reads a required identifier (INVALID_ID when absent, not a string, or
// invalid).
func (o refObject) id(name, field string) (string, error) {
	s, ok := o.str(name)
	if !ok {
		return "", Errorf(ErrInvalidID, "%s must be a string", field)
	}
	return s, CheckID(field, s)
}

// nullableID reads an identifier that may be null or absent ("" in Go); an
// empty string is INVALID_ID (SPEC §10 Q11).
func (o refObject) nullableID(name, field string) (string, error) {
	raw, ok := o[name]
	if !ok || refIsNull(raw) {
		return "", nil
	}
	return o.id(name, field)
}

// integer reads a JSON number that must be an integer within ±(2^53−1).
func (o refObject) integer(name string) (int64, bool) {
	raw, ok := o[name]
	if !ok {
		return 0, false
	}
	return parseSafeInt(bytes.TrimSpace(raw))
}

// refCheckpointObject holds a checkpoint's raw members between the two phases
// of checking: identifiers first, content second (SPEC §2.5 steps 1 and 2).
type refCheckpointObject struct {
	o  refObject
	cp Checkpoint
}

func refParseCheckpointObject(raw json.RawMessage) (*refCheckpointObject, error) {
	o, err := refParseObject(raw, ErrInvalidID, "checkpoint")
	if err != nil {
		return nil, err
	}
	return &refCheckpointObject{o: o}, nil
}

func (c *refCheckpointObject) ids() (err error) {
	if c.cp.ID, err = c.o.id("id", "checkpoint id"); err != nil {
		return err
	}
	if c.cp.ThreadID, err = c.o.id("threadId", "checkpoint threadId"); err != nil {
		return err
	}
	return nil
}

func (c *refCheckpointObject) parent() (err error) {
	c.cp.ParentID, err = c.o.nullableID("parentCheckpointId", "parentCheckpointId")
	return err
}

func (c *refCheckpointObject) content() error {
	o := c.o
	var ok bool
	if c.cp.CreatedAt, ok = o.integer("createdAt"); !ok {
		return Errorf(ErrInvalidEntry, "checkpoint createdAt must be an integer within ±(2^53−1)")
	}
	reason, _ := o.str("reason")
	c.cp.Reason = Reason(reason)
	for _, name := range []string{"label", "sourceRunId"} {
		if raw, present := o[name]; present && !refIsNull(raw) {
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
	if err := refRawArray(o["files"], &raws, "checkpoint files"); err != nil {
		return err
	}
	c.cp.Files = make([]Entry, len(raws))
	for i, r := range raws {
		if err := refParseEntry(r, &c.cp.Files[i]); err != nil {
			return err
		}
	}
	if err := refRawArray(o["artifacts"], &raws, "checkpoint artifacts"); err != nil {
		return err
	}
	c.cp.Artifacts = make([]Artifact, len(raws))
	for i, r := range raws {
		if err := refParseArtifact(r, &c.cp.Artifacts[i]); err != nil {
			return err
		}
	}
	if err := refRawArray(o["conversation"], &c.cp.Conversation, "checkpoint conversation"); err != nil {
		return err
	}
	return ValidateContent(&c.cp)
}

func refRawArray(raw json.RawMessage, out *[]json.RawMessage, what string) error {
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

func refParseEntry(raw json.RawMessage, e *Entry) error {
	o, err := refParseObject(raw, ErrInvalidEntry, "Checkpoint entry")
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
	for _, name := range refForeignFields[e.Kind] {
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

// refForeignFields lists, per kind, the members an entry of that kind must not
// have at all. An unknown kind is left to ValidateFiles.
var refForeignFields = map[Kind][]string{
	KindFile:    {"target"},
	KindDir:     {"blobKey", "size", "executable", "target"},
	KindSymlink: {"blobKey", "size", "executable"},
}

func refParseArtifact(raw json.RawMessage, a *Artifact) error {
	bad := Errorf(ErrInvalidEntry, "Checkpoint artifact has invalid fields")
	o, err := refParseObject(raw, ErrInvalidEntry, "Checkpoint artifact")
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

// refParseCheckpoint decodes a checkpoint from its JSON wire form and checks it
// in the contract's order: identifiers (INVALID_ID), then createdAt, reason,
// files, artifacts and conversation (INVALID_ENTRY).
func refParseCheckpoint(raw []byte) (*Checkpoint, error) {
	c, err := refParseCheckpointObject(raw)
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

// refParseAppendInput decodes {"checkpoint", "expectedHeadId", "writer"} and
// checks it as append does before touching the store: all identifiers first
// (checkpoint id and thread, writer thread, expected head, parent), then the
// content.
func refParseAppendInput(raw []byte) (AppendInput, error) {
	var in AppendInput
	o, err := refParseObject(raw, ErrInvalidID, "append input")
	if err != nil {
		return in, err
	}
	c, err := refParseCheckpointObject(o["checkpoint"])
	if err != nil {
		return in, err
	}
	if err := c.ids(); err != nil {
		return in, err
	}
	if in.Writer, err = refParseWriter(o["writer"]); err != nil {
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

// refParseWriter decodes {"threadId", "ownerToken", "fence"}. Only the thread id
// is an identifier; a token or fence of the wrong type can never match a
// lease, so it is WRITER_LOST.
func refParseWriter(raw json.RawMessage) (Writer, error) {
	var w Writer
	o, err := refParseObject(raw, ErrInvalidID, "writer")
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
