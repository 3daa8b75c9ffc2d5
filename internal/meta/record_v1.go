package meta

import (
	"github.com/sbxdb/sbxdb/chain"
)

// The whole-checkpoint encoding: the record of store format 1, read now only
// to migrate such a store (record.go has formats 2 and 3). chain.RecordSize
// measures a checkpoint in it, what a checkpoint takes stored whole, against
// chain.MaxRecordBytes.
//
//	id, threadId, parentId, reason, label, sourceRunId  strings
//	createdAt                                           varint
//	files:     count, then per entry: kind byte ('f','d','l'), flags byte
//	           (bit 0 executable), path; file: 32-byte digest, size uvarint;
//	           symlink: target
//	artifacts: count, then artifactId, name, mimeType, 32-byte digest,
//	           size uvarint, createdAt varint
//	conversation: count, then each message's bytes
//
// Blob keys are stored as their 32-byte digest: the kind implies the prefix.

// EncodeCheckpoint returns the binary payload of a valid checkpoint.
func EncodeCheckpoint(cp *chain.Checkpoint) []byte {
	// Sized exactly: a record may be hundreds of megabytes (chain.MaxRecordBytes),
	// and growing the buffer by appending would copy it repeatedly.
	e := &Encoder{b: make([]byte, 0, chain.RecordSize(cp))}
	for _, s := range []string{cp.ID, cp.ThreadID, cp.ParentID, string(cp.Reason), cp.Label, cp.SourceRunID} {
		e.String(s)
	}
	e.Varint(cp.CreatedAt)
	e.Uvarint(uint64(len(cp.Files)))
	for i := range cp.Files {
		f := &cp.Files[i]
		var flags byte
		if f.Executable {
			flags |= flagExecutable
		}
		switch f.Kind {
		case chain.KindFile:
			e.Byte('f')
			e.Byte(flags)
			e.String(f.Path)
			e.digest(f.BlobKey, chain.FilePrefix)
			e.Uvarint(uint64(f.Size))
		case chain.KindDir:
			e.Byte('d')
			e.Byte(flags)
			e.String(f.Path)
		case chain.KindSymlink:
			e.Byte('l')
			e.Byte(flags)
			e.String(f.Path)
			e.String(f.Target)
		}
	}
	encodeArtifacts(e, cp.Artifacts)
	e.Uvarint(uint64(len(cp.Conversation)))
	for _, m := range cp.Conversation {
		e.Raw(m)
	}
	return e.b
}

// DecodeCheckpoint decodes a payload written by EncodeCheckpoint.
func DecodeCheckpoint(p []byte) (*chain.Checkpoint, error) {
	d := NewDecoder(p)
	cp := &chain.Checkpoint{}
	cp.ID, cp.ThreadID, cp.ParentID = d.String(), d.String(), d.String()
	cp.Reason = chain.Reason(d.String())
	cp.Label, cp.SourceRunID = d.String(), d.String()
	cp.CreatedAt = d.Varint()
	cp.Files = make([]chain.Entry, d.Count(3))
	for i := range cp.Files {
		f := &cp.Files[i]
		*f = d.entry()
		if f.Kind == chain.KindFile { // format 1 keeps a file's digest and size inline
			f.BlobKey = d.digest(chain.FilePrefix)
			f.Size = int64(d.Uvarint())
		}
	}
	cp.Artifacts = decodeArtifacts(d)
	cp.Conversation = decodeMessages(d)
	if err := d.Err(); err != nil {
		return nil, err
	}
	return cp, nil
}
