package chain

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// MaxIDBytes is the longest identifier, in UTF-8 bytes (SPEC §10 Q12).
const MaxIDBytes = 4096

// Why MaxRecordBytes: a record is one bbolt value, and bbolt refuses values
// past bolt.MaxValueSize (2 GiB − 2) with a plain error that carries no
// code, after the caller has paid four times the record in memory to encode
// it (measured: 8 GB and 12 s for a 2 GiB conversation). Why 256 MiB:
// writing a record allocates 4 to 6.5 times its size (input copy, encoding,
// seal, bbolt's page buffer) and a fork up to 17 times, so the limit keeps
// one write within a few GB; a million-entry manifest is about 56 MB and a
// 100 MB conversation 100 MB, both well inside.

// MaxRecordBytes bounds RecordSize and TranscriptSize: writes past it fail
// first (ErrTooLarge); reads check stored records too: never lower it.
const MaxRecordBytes = 256 << 20

// MaxSafeInteger is 2^53−1, the largest integer a JavaScript number holds
// exactly; sizes and createdAt values must stay within ±MaxSafeInteger.
const MaxSafeInteger = 1<<53 - 1

// CheckID returns an INVALID_ID error naming field unless id is non-empty,
// well-formed UTF-8 without NUL, at most MaxIDBytes (SPEC §1.6, §10 Q10, Q12).
func CheckID(field, id string) error {
	switch {
	case id == "":
		return Errorf(ErrInvalidID, "%s is empty", field)
	case len(id) > MaxIDBytes:
		return tooLarge(ErrInvalidID, field, len(id), MaxIDBytes)
	case !utf8.ValidString(id):
		return Errorf(ErrInvalidID, "%s %q is not well-formed Unicode", field, id)
	case strings.IndexByte(id, 0) >= 0:
		return Errorf(ErrInvalidID, "%s %q contains NUL", field, id)
	}
	return nil
}

// CheckIDs checks field/value pairs in order and returns the first error.
func CheckIDs(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := CheckID(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// CheckCreatedAt rejects a time outside ±MaxSafeInteger milliseconds.
func CheckCreatedAt(field string, ms int64) error {
	if ms > MaxSafeInteger || ms < -MaxSafeInteger {
		return Errorf(ErrInvalidEntry, "%s %d is outside ±(2^53−1)", field, ms)
	}
	return nil
}

// ValidateAppend runs append's steps 1 and 2 (SPEC §2.5, §10 Q6): ids, then
// ValidateContent; the store then checks writer, duplicate id, head, parent.
func ValidateAppend(in AppendInput) error {
	cp := in.Checkpoint
	if cp == nil {
		return Errorf(ErrInvalidID, "checkpoint is missing")
	}
	if err := CheckIDs("checkpoint id", cp.ID, "checkpoint threadId", cp.ThreadID,
		"writer threadId", in.Writer.ThreadID); err != nil {
		return err
	}
	if in.ExpectedHeadID != "" {
		if err := CheckID("expectedHeadId", in.ExpectedHeadID); err != nil {
			return err
		}
	}
	if cp.ParentID != "" {
		if err := CheckID("parentCheckpointId", cp.ParentID); err != nil {
			return err
		}
	}
	return ValidateContent(cp)
}

// ValidateContent checks size, createdAt, reason, files, artifacts, conversation.
func ValidateContent(cp *Checkpoint) error {
	// The record's size first: one pass over the lengths spares a hostile
	// input the rest.
	if n := RecordSize(cp); n > MaxRecordBytes {
		return tooLarge(ErrInvalidEntry, "checkpoint record", n, MaxRecordBytes)
	}
	if err := CheckCreatedAt("checkpoint createdAt", cp.CreatedAt); err != nil {
		return err
	}
	switch cp.Reason {
	case ReasonAutomatic, ReasonNamed, ReasonForkRoot:
	default:
		return Errorf(ErrInvalidEntry, "checkpoint reason %q must be automatic, named or fork-root", cp.Reason)
	}
	if err := ValidateFiles(cp.Files); err != nil {
		return err
	}
	for i := range cp.Artifacts {
		if err := ValidateArtifact(&cp.Artifacts[i]); err != nil {
			return err
		}
	}
	return ValidateMessages(cp.Conversation)
}

// ValidatePath applies SPEC §1.2's path rules in the reference's order.
func ValidatePath(p string) error {
	bad := func(why string) error {
		return Errorf(ErrInvalidEntry, "checkpoint entry path %q %s", p, why)
	}
	switch {
	case p == "":
		return bad("is empty")
	case strings.IndexByte(p, 0) >= 0:
		return bad("contains NUL")
	case p[0] == '/':
		return bad("is absolute")
	case p[0] == '\\':
		return bad("starts with a backslash")
	case isDrivePrefix(p):
		return bad("has a drive prefix")
	case strings.IndexByte(p, '\\') >= 0:
		return bad("contains a backslash")
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "":
			return bad("has an empty segment")
		case ".", "..":
			return bad("has a " + seg + " segment")
		}
	}
	return nil
}

// isDrivePrefix matches "ASCII letter, colon, then slash, backslash or end".
func isDrivePrefix(p string) bool {
	if len(p) < 2 || p[1] != ':' {
		return false
	}
	c := p[0] | 0x20
	if c < 'a' || c > 'z' {
		return false
	}
	return len(p) == 2 || p[2] == '/' || p[2] == '\\'
}

// checkBlobKey reports whether key is prefix followed by 64 lowercase hex
// digits.
func checkBlobKey(key, prefix string) bool {
	if len(key) != len(prefix)+64 || !strings.HasPrefix(key, prefix) {
		return false
	}
	for i := len(prefix); i < len(key); i++ {
		if !lowerHex[key[i]] {
			return false
		}
	}
	return true
}

// lowerHex marks the bytes of lowercase hex digits. A table lookup per byte
// does not mispredict on random digits as two range tests do, so checking
// a manifest's keys costs a fraction of what the range tests cost.
var lowerHex = func() (t [256]bool) {
	for _, c := range "0123456789abcdef" {
		t[c] = true
	}
	return t
}()

// ValidateFiles checks a manifest in list order (SPEC §1.2): paths, no
// duplicate, nothing beneath a file or symlink, each kind's fields.
func ValidateFiles(files []Entry) error {
	// Cost is linear in the total path length. A manifest in path byte
	// order (what capture writes) takes a path without maps; both report
	// the same first error.
	for i := 1; i < len(files); i++ {
		if files[i].Path < files[i-1].Path {
			return validateFilesAnyOrder(files)
		}
	}
	return validateSortedFiles(files)
}

// validateSortedFiles is ValidateFiles for paths in non-decreasing byte
// order. A duplicate is then the previous entry, and nothing can come before
// a file it lies beneath. The paths beneath a file f are exactly those with
// the prefix f+"/", and strings sharing a prefix are contiguous in sorted
// order, so a stack of the files and symlinks whose block may still come
// replaces the maps: a block is over once a path is past it.
func validateSortedFiles(files []Entry) error {
	var open []*Entry // files and symlinks, increasing paths
	for i := range files {
		e := &files[i]
		if err := ValidatePath(e.Path); err != nil {
			return err
		}
		if i > 0 && files[i-1].Path == e.Path {
			return Errorf(ErrInvalidEntry, "checkpoint entry path %q is listed twice", e.Path)
		}
		for len(open) > 0 {
			f := open[len(open)-1]
			p := e.Path
			if len(p) > len(f.Path) && p[:len(f.Path)] == f.Path {
				if p[len(f.Path)] == '/' {
					return Errorf(ErrInvalidEntry, "checkpoint entry %q lies beneath %s %q", p, f.Kind, f.Path)
				}
				if p[len(f.Path)] < '/' {
					break // f's block is still ahead; so are those below it
				}
			}
			open = open[:len(open)-1] // p is past f's block
		}
		if err := validateEntryFields(e); err != nil {
			return err
		}
		if e.Kind != KindDir {
			open = append(open, e)
		}
	}
	return nil
}

// validateFilesAnyOrder is ValidateFiles for a manifest in any order.
func validateFilesAnyOrder(files []Entry) error {
	// seen maps each entry path to its kind; under holds every proper
	// ancestor of a seen path, so "an earlier entry lies beneath p" is one
	// lookup.
	seen := make(map[string]Kind, len(files))
	under := make(map[string]struct{}, len(files))
	for i := range files {
		e := &files[i]
		if err := ValidatePath(e.Path); err != nil {
			return err
		}
		if _, dup := seen[e.Path]; dup {
			return Errorf(ErrInvalidEntry, "checkpoint entry path %q is listed twice", e.Path)
		}
		for j := strings.IndexByte(e.Path, '/'); j >= 0; {
			anc := e.Path[:j]
			if k, ok := seen[anc]; ok && k != KindDir {
				return Errorf(ErrInvalidEntry, "checkpoint entry %q lies beneath %s %q", e.Path, k, anc)
			}
			next := strings.IndexByte(e.Path[j+1:], '/')
			if next < 0 {
				break
			}
			j += 1 + next
		}
		if e.Kind != KindDir {
			if _, ok := under[e.Path]; ok {
				return Errorf(ErrInvalidEntry, "checkpoint entry %q is a %s with entries beneath it", e.Path, e.Kind)
			}
		}
		if err := validateEntryFields(e); err != nil {
			return err
		}
		seen[e.Path] = e.Kind
		for j := strings.LastIndexByte(e.Path, '/'); j > 0; j = strings.LastIndexByte(e.Path[:j], '/') {
			if _, ok := under[e.Path[:j]]; ok {
				break // its ancestors are recorded already
			}
			under[e.Path[:j]] = struct{}{}
		}
	}
	return nil
}

func validateEntryFields(e *Entry) error {
	switch e.Kind {
	case KindFile:
		if !checkBlobKey(e.BlobKey, FilePrefix) { // ASCII when it passes
			return Errorf(ErrInvalidEntry, "checkpoint entry %q has invalid blobKey %q", e.Path, e.BlobKey)
		}
		if e.Size < 0 || e.Size > MaxSafeInteger {
			return Errorf(ErrInvalidEntry, "checkpoint entry %q has invalid size %d", e.Path, e.Size)
		}
		if e.Target != "" {
			return Errorf(ErrInvalidEntry, "checkpoint file entry %q cannot have a symlink target", e.Path)
		}
	case KindDir:
		if e.BlobKey != "" || e.Size != 0 || e.Executable || e.Target != "" {
			return Errorf(ErrInvalidEntry, "Directory entries cannot contain file fields (%q)", e.Path)
		}
	case KindSymlink:
		if e.BlobKey != "" || e.Size != 0 || e.Executable {
			return Errorf(ErrInvalidEntry, "Symlink entries cannot contain file fields (%q)", e.Path)
		}
		if e.Target == "" || !utf8.ValidString(e.Target) || strings.IndexByte(e.Target, 0) >= 0 {
			return Errorf(ErrInvalidEntry, "symlink entry %q needs a non-empty target without NUL", e.Path)
		}
	default:
		return Errorf(ErrInvalidEntry, "checkpoint entry %q kind %q must be file, dir or symlink", e.Path, e.Kind)
	}
	return nil
}

// ValidateArtifact applies the single combined artifact check of SPEC §1.3.
func ValidateArtifact(a *Artifact) error {
	ok := a.ArtifactID != "" && utf8.ValidString(a.ArtifactID) &&
		a.Name != "" && a.MimeType != "" &&
		checkBlobKey(a.BlobKey, ArtifactPrefix) &&
		a.Size >= 0 && a.Size <= MaxSafeInteger &&
		a.CreatedAt >= -MaxSafeInteger && a.CreatedAt <= MaxSafeInteger
	if !ok {
		return Errorf(ErrInvalidEntry, "Checkpoint artifact has invalid fields (artifactId %q)", a.ArtifactID)
	}
	return nil
}

// ValidateMessages checks a transcript's size and that each message is JSON.
func ValidateMessages(msgs []json.RawMessage) error {
	if n := TranscriptSize(msgs); n > MaxRecordBytes {
		return tooLarge(ErrInvalidEntry, "transcript", n, MaxRecordBytes)
	}
	for i, m := range msgs {
		if !validJSON(m) {
			return Errorf(ErrInvalidEntry, "message %d is not valid JSON", i)
		}
	}
	return nil
}
