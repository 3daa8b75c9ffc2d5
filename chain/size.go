package chain

import (
	"encoding/json"
	"math/bits"
)

// RecordSize returns len(meta.EncodeCheckpoint(cp)) without encoding cp.
func RecordSize(cp *Checkpoint) int {
	// The record as store format 1 kept it whole: strings and messages are
	// length-prefixed with a uvarint, integers are varints, an entry takes a
	// kind and a flags byte and a blob key its 32-byte digest.
	n := 0
	for _, s := range []string{cp.ID, cp.ThreadID, cp.ParentID, string(cp.Reason), cp.Label, cp.SourceRunID} {
		n += prefixed(len(s))
	}
	n += varintSize(cp.CreatedAt)
	n += uvarintSize(uint64(len(cp.Files)))
	for i := range cp.Files {
		f := &cp.Files[i]
		n += 2 + prefixed(len(f.Path)) // kind, flags, path
		switch f.Kind {
		case KindFile:
			n += 32 + uvarintSize(uint64(f.Size))
		case KindSymlink:
			n += prefixed(len(f.Target))
		}
	}
	n += uvarintSize(uint64(len(cp.Artifacts)))
	for i := range cp.Artifacts {
		a := &cp.Artifacts[i]
		n += prefixed(len(a.ArtifactID)) + prefixed(len(a.Name)) + prefixed(len(a.MimeType)) +
			32 + uvarintSize(uint64(a.Size)) + varintSize(a.CreatedAt)
	}
	return n + TranscriptSize(cp.Conversation)
}

// TranscriptSize returns len(meta.EncodeMessages(msgs)) without encoding.
func TranscriptSize(msgs []json.RawMessage) int {
	// A transcript payload: a count, then each message length-prefixed.
	n := uvarintSize(uint64(len(msgs)))
	for _, m := range msgs {
		n += prefixed(len(m))
	}
	return n
}

// prefixed is the encoded size of l bytes with their length prefix.
func prefixed(l int) int { return uvarintSize(uint64(l)) + l }

// uvarintSize is the length of binary.AppendUvarint(nil, v): one byte per
// started group of 7 significant bits, at least one.
func uvarintSize(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// varintSize is the size of binary.AppendVarint's zig-zag encoding.
func varintSize(v int64) int { return uvarintSize(uint64(v<<1) ^ uint64(v>>63)) }
