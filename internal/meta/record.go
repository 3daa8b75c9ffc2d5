package meta

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Stored checkpoints, formats 2 and 3: a small record and shared chunks.
//
// Consecutive checkpoints of a thread share almost all their manifest and
// conversation. Stored whole, a thread of 200 checkpoints of a 20,000-file
// workspace would repeat a 1.4 MB manifest 200 times and its conversations
// would grow quadratically. So a checkpoint is stored as a record holding
// its header, its artifacts and lists of chunk ids, and the manifest and
// the messages live in content-addressed chunks (chunks.go) that
// checkpoints share.
//
// The manifest is cut into groups of about 32 entries, at boundaries chosen
// by a hash of the entry's path, so that a boundary does not move when a
// file changes and an inserted or removed entry changes only its own group.
// Each group is three kinds of chunk:
//
//   - a shape chunk: each entry's kind, flags, path and symlink target,
//     what an edit does not change;
//   - content chunks: each file's digest and size, what an edit changes.
//     They are small (2 to 4 files, cut on other bits of the path hash),
//     because one turn's edits are spread over the tree and each edited
//     file costs the whole chunk it is in;
//   - an index chunk: the ids of the group's content chunks. An edit
//     rewrites its group's index (about 20 ids) rather than the ids of
//     every content chunk of the manifest in each record: for 200 edits of
//     20,000 files, 150 indexes of 180 bytes instead of a 55 KB list.
//
// Each message is one chunk: a conversation grows by appending, so a new
// checkpoint stores only its new messages and one id for each old one.
//
// A small manifest (at most inlineManifestMax bytes of shape and content)
// is not cut at all: its shape and content bytes are in the record itself.
// Chunks save nothing there (the ids and a chunk's key and seal take about
// what the entries take) and cost much: each new chunk lands on a random
// leaf page of the chunks bucket that the commit rewrites, and its count
// is one more write at the fold. With 64 writers of 10-file checkpoints
// the chunk puts took a third of the committer's time.
//
// Record payload (sealed under its checkpoint id in BucketCheckpoints):
//
//	id, threadId, parentId, reason, label, sourceRunId  strings
//	createdAt    varint
//	fullSize     uvarint: chain.RecordSize, what the checkpoint takes stored whole
//	entries      uvarint: number of manifest entries
//	groups       count uvarint, then per group its shape chunk id and its
//	             index chunk id, 8 bytes big-endian each
//	inline       only when groups is 0 and entries is not (format 3): the
//	             manifest's shape bytes, then its content bytes, each
//	             length-prefixed, encoded as the chunks would hold them.
//	             A format-2 record never has it (its groups are 0 only
//	             for an empty manifest), so it reads the same in format 3
//	artifacts    count, then artifactId, name, mimeType, 32-byte digest,
//	             size uvarint, createdAt varint (as in EncodeCheckpoint)
//	messages     count, ids: one chunk per message, in order
//
//	shape chunk    per entry: kind byte ('f','d','l'), flags byte (bit 0
//	               executable), path string; a symlink adds its target
//	index chunk    the group's content chunk ids, 8 bytes each, in order
//	content chunk  per file entry: 32-byte digest, size uvarint
//	message chunk  the message's bytes
//
// The ids in a record are addresses, not claims: a chunk is stored under
// the xxhash64 of its bytes, or the next free id after it when another
// chunk holds that one (chunkCursor.store compares the bytes), so a
// collision never makes a record name another record's data.

const (
	// A group ends after a path whose hash has these bits 0, or at
	// maxGroup entries: an edit rewrites its group's index, and without a
	// bound the groups edits land in are the long ones (size-biased).
	shapeMask = 31
	maxGroup  = 64
	// A content chunk ends likewise, on other bits of the hash, and at the
	// end of its group, holding from minContent to maxContent files.
	// Without the bounds the sizes are geometric, and an edited file most
	// often lands in a long chunk (a chunk holding a random file averaged
	// 7 files where the mean was 4).
	contentMask = 1
	minContent  = 2
	maxContent  = 4
	// maxChunkBytes ends a group whatever the hashes say: a run of paths
	// without a boundary must not make one chunk of the manifest.
	maxChunkBytes = 64 << 10
	// inlineManifestMax is the largest manifest, in shape plus content
	// bytes, stored in its record rather than in chunks: about 30 files,
	// so that the record of a small checkpoint still fits half a page.
	inlineManifestMax = 2 << 10
)

// Prepared is a checkpoint encoded for storing: its record, its chunks and
// their seal checksums, and its index key. Preparing is pure CPU work
// (hashing and encoding): writers do it before they enter the shared write
// transaction, so group commit spends its single-threaded time on bbolt.
type Prepared struct {
	ID       string
	record   []byte // payload, chunk ids as if none collides
	chunks   []preparedChunk
	order    []int32 // chunks by hash: the order to store them in
	index    []byte  // thread-index key
	indexVal []byte  // sealed
	cp       *chain.Checkpoint
}

type preparedChunk struct {
	hash  uint64 // xxhash64 of data: the id unless it collides
	sum   uint64 // the seal checksum of data under id hash
	in    int32  // where its id is written: -1 the record, else that index chunk
	slot  int32  // offset of its id there
	index bool   // an index chunk, whose data are the ids of others
	data  []byte // aliases the checkpoint or a buffer of Prepare
}

// manifestGroup is one group of a manifest: its shape chunk and its
// content chunks.
type manifestGroup struct {
	shape   []byte
	content [][]byte
}

// Prepare encodes a valid checkpoint for PutPrepared.
func Prepare(cp *chain.Checkpoint) *Prepared {
	p := &Prepared{ID: cp.ID, cp: cp}
	p.index = indexKey(cp.ThreadID, cp.CreatedAt, cp.ID)
	p.indexVal = Seal(BucketThreadIndex, p.index, nil)

	sn, cn := manifestSize(cp.Files)
	var (
		groups             []manifestGroup
		nContent           int
		inShape, inContent []byte // an inline manifest
	)
	if sn+cn <= inlineManifestMax {
		inShape, inContent = make([]byte, 0, sn), make([]byte, 0, cn)
		for i := range cp.Files {
			inShape, inContent = appendEntry(inShape, inContent, &cp.Files[i])
		}
	} else {
		groups, nContent = splitManifest(cp.Files, sn, cn)
	}
	n := 5*binary.MaxVarintLen64 + 16*len(groups) + 8*len(cp.Conversation) + len(inShape) + len(inContent)
	for _, s := range []string{cp.ID, cp.ThreadID, cp.ParentID, string(cp.Reason), cp.Label, cp.SourceRunID} {
		n += prefixed(len(s))
	}
	for i := range cp.Artifacts {
		a := &cp.Artifacts[i]
		n += prefixed(len(a.ArtifactID)) + prefixed(len(a.Name)) + prefixed(len(a.MimeType)) + 32 + 2*binary.MaxVarintLen64
	}
	e := &Encoder{b: make([]byte, 0, n+6*binary.MaxVarintLen64)}
	for _, s := range []string{cp.ID, cp.ThreadID, cp.ParentID, string(cp.Reason), cp.Label, cp.SourceRunID} {
		e.String(s)
	}
	e.Varint(cp.CreatedAt)
	e.Uvarint(uint64(chain.RecordSize(cp)))
	e.Uvarint(uint64(len(cp.Files)))
	p.chunks = make([]preparedChunk, 0, 2*len(groups)+nContent+len(cp.Conversation))
	ids := make([]byte, 0, 8*nContent) // every index chunk's data, one buffer
	e.Uvarint(uint64(len(groups)))
	for _, g := range groups {
		p.add(g.shape, -1, len(e.b), false)
		e.b = binary.BigEndian.AppendUint64(e.b, p.chunks[len(p.chunks)-1].hash)
		at := int32(len(p.chunks) + len(g.content)) // the index chunk, added after its content
		start := len(ids)
		for _, c := range g.content {
			p.add(c, at, len(ids)-start, false)
			ids = binary.BigEndian.AppendUint64(ids, p.chunks[len(p.chunks)-1].hash)
		}
		p.add(ids[start:], -1, len(e.b), true)
		e.b = binary.BigEndian.AppendUint64(e.b, p.chunks[len(p.chunks)-1].hash)
	}
	if len(groups) == 0 && len(cp.Files) > 0 {
		e.Raw(inShape)
		e.Raw(inContent)
	}
	encodeArtifacts(e, cp.Artifacts)
	e.Uvarint(uint64(len(cp.Conversation)))
	for _, m := range cp.Conversation {
		p.add(m, -1, len(e.b), false)
		e.b = binary.BigEndian.AppendUint64(e.b, p.chunks[len(p.chunks)-1].hash)
	}
	p.record = e.b
	// All chunks in key order: bbolt keeps a node's keys in a slice and
	// inserts into it by copying what follows, and splits nodes only at
	// the commit, so a fresh store's first million chunks in random order
	// made the append of a million-entry manifest quadratic (217 s; 99 s
	// with the index chunks sorted apart, after the leaves). In key order,
	// each lands at the end.
	p.order = make([]int32, len(p.chunks))
	for i := range p.order {
		p.order[i] = int32(i)
	}
	slices.SortFunc(p.order, func(a, b int32) int { return cmp.Compare(p.chunks[a].hash, p.chunks[b].hash) })
	return p
}

// add appends a chunk whose id goes at slot of the record (in -1) or of
// index chunk in.
func (p *Prepared) add(data []byte, in int32, slot int, index bool) {
	h := xxhash.Sum64(data)
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], h)
	p.chunks = append(p.chunks, preparedChunk{hash: h, sum: sum(BucketChunks, k[:], data), in: in, slot: int32(slot), index: index, data: data})
}

// manifestSize returns the encoded sizes of the shape and the content of
// files.
func manifestSize(files []chain.Entry) (sn, cn int) {
	for i := range files {
		f := &files[i]
		sn += 2 + prefixed(len(f.Path))
		switch f.Kind {
		case chain.KindFile:
			cn += 32 + uvarintSize(uint64(f.Size))
		case chain.KindSymlink:
			sn += prefixed(len(f.Target))
		}
	}
	return sn, cn
}

// appendEntry appends f's shape to s and, for a file, its content to c.
func appendEntry(s, c []byte, f *chain.Entry) ([]byte, []byte) {
	var flags byte
	if f.Executable {
		flags |= flagExecutable
	}
	switch f.Kind {
	case chain.KindFile:
		s = append(s, 'f', flags)
		c = appendDigest(c, f.BlobKey, chain.FilePrefix)
		c = binary.AppendUvarint(c, uint64(f.Size))
	case chain.KindDir:
		s = append(s, 'd', flags)
	case chain.KindSymlink:
		s = append(s, 'l', flags)
	}
	s = binary.AppendUvarint(s, uint64(len(f.Path)))
	s = append(s, f.Path...)
	if f.Kind == chain.KindSymlink {
		s = binary.AppendUvarint(s, uint64(len(f.Target)))
		s = append(s, f.Target...)
	}
	return s, c
}

// flagExecutable is the bit of an entry's flags byte that marks an
// executable file, in every record format.
const flagExecutable = 1

// entry reads a manifest entry's kind byte, flags and path, and a
// symlink's target: what both record formats write in that order. A
// file's digest and size are the caller's to read (inline in format 1, in
// content chunks since format 2, or inline in the record in format 3).
func (d *Decoder) entry() (f chain.Entry) {
	kind, flags := d.Byte(), d.Byte()
	f.Path = d.String()
	f.Executable = flags&flagExecutable != 0
	switch kind {
	case 'f':
		f.Kind = chain.KindFile
	case 'd':
		f.Kind = chain.KindDir
	case 'l':
		f.Kind = chain.KindSymlink
		f.Target = d.String()
	default:
		d.fail("entry kind")
	}
	return f
}

// splitManifest encodes the shape and content of files, each in one buffer
// of the size manifestSize gave, and cuts them into groups and chunks
// (slices of those buffers): a manifest may hold a million entries. It
// returns the groups and their number of content chunks.
func splitManifest(files []chain.Entry, sn, cn int) (groups []manifestGroup, nContent int) {
	s, c := make([]byte, 0, sn), make([]byte, 0, cn)
	sStart, cStart := 0, 0
	n := 0       // files in the content chunk being cut
	entries := 0 // in the group being cut
	var g manifestGroup
	for i := range files {
		f := &files[i]
		h := xxhash.Sum64String(f.Path)
		s, c = appendEntry(s, c, f)
		if f.Kind == chain.KindFile {
			n++
		}
		entries++
		groupEnds := h&shapeMask == 0 || entries == maxGroup || len(s)-sStart >= maxChunkBytes || i == len(files)-1
		if n > 0 && (groupEnds || n >= minContent && (h>>32)&contentMask == 0 || n == maxContent) {
			g.content, cStart, n = append(g.content, c[cStart:]), len(c), 0
			nContent++
		}
		if groupEnds {
			g.shape, sStart, entries = s[sStart:], len(s), 0
			groups, g = append(groups, g), manifestGroup{}
		}
	}
	return groups, nContent
}

func encodeArtifacts(e *Encoder, arts []chain.Artifact) {
	e.Uvarint(uint64(len(arts)))
	for i := range arts {
		a := &arts[i]
		e.String(a.ArtifactID)
		e.String(a.Name)
		e.String(a.MimeType)
		e.digest(a.BlobKey, chain.ArtifactPrefix)
		e.Uvarint(uint64(a.Size))
		e.Varint(a.CreatedAt)
	}
}

func decodeArtifacts(d *Decoder) []chain.Artifact {
	arts := make([]chain.Artifact, d.Count(36))
	for i := range arts {
		a := &arts[i]
		a.ArtifactID, a.Name, a.MimeType = d.String(), d.String(), d.String()
		a.BlobKey = d.digest(chain.ArtifactPrefix)
		a.Size = int64(d.Uvarint())
		a.CreatedAt = d.Varint()
	}
	return arts
}

// BlobKeys returns the checkpoint's distinct blob keys, sorted. It computes
// them on each call: an append does not need them (its references stay
// pending), and for 20,000 files they cost as much as the rest of Prepare.
func (p *Prepared) BlobKeys() []string { return p.cp.BlobKeys() }

// storedRecord is a decoded record: the header and the chunk lists, not
// the chunks. Its id lists alias the transaction's memory.
type storedRecord struct {
	id, threadID, parentID     string
	reason, label, sourceRunID string
	createdAt                  int64
	fullSize                   uint64
	entries                    uint64
	groups                     idList // shape id, index id, for each group
	inline                     bool   // the manifest is in the record:
	shape, content             []byte // its bytes (groups is empty)
	messages                   idList
	artifacts                  []chain.Artifact
}

// idList is a run of 8-byte big-endian chunk ids.
type idList []byte

func (l idList) len() int        { return len(l) / 8 }
func (l idList) at(i int) uint64 { return binary.BigEndian.Uint64(l[8*i:]) }

// idList reads a count of n-id tuples and their ids.
func (d *Decoder) idList(n int) idList { return idList(d.Fixed(8 * n * d.Count(8*n))) }

func decodeRecord(p []byte) (*storedRecord, error) {
	d := NewDecoder(p)
	r := &storedRecord{}
	r.id, r.threadID, r.parentID = d.String(), d.String(), d.String()
	r.reason, r.label, r.sourceRunID = d.String(), d.String(), d.String()
	r.createdAt = d.Varint()
	r.fullSize = d.Uvarint()
	r.entries = d.Uvarint()
	r.groups = d.idList(2)
	if r.inline = r.groups.len() == 0 && r.entries > 0; r.inline {
		r.shape = d.take(d.Uvarint(), "inline shape")
		r.content = d.take(d.Uvarint(), "inline content")
	}
	r.artifacts = decodeArtifacts(d)
	r.messages = d.idList(1)
	if err := d.Err(); err != nil {
		return nil, err
	}
	// What the record claims bounds what reading it may produce (a valid
	// record produces exactly fullSize bytes, within chain.MaxRecordBytes): a
	// forged one naming one large chunk many times must fail, not make the
	// reader allocate its size each time.
	switch {
	case r.fullSize > chain.MaxRecordBytes:
		return nil, fmt.Errorf("claims %d bytes, more than the limit", r.fullSize)
	case r.entries > r.fullSize/3: // an entry is at least 3 bytes
		return nil, fmt.Errorf("claims %d entries in %d bytes", r.entries, r.fullSize)
	case uint64(r.groups.len()/2) > r.entries: // a group holds an entry or more
		return nil, fmt.Errorf("%d groups for %d entries", r.groups.len()/2, r.entries)
	}
	return r, nil
}

// contentLists returns each group's content chunk ids, read from its index
// chunk (aliasing it). Each content chunk holds a file or more, so a record
// naming more than its entries is corrupt: that bounds what a forged index
// makes a reader allocate.
func (r *storedRecord) contentLists(chunks chunkSource) ([]idList, error) {
	lists := make([]idList, r.groups.len()/2)
	total := 0
	for g := range lists {
		l, err := r.contentIDs(chunks, g)
		if err != nil {
			return nil, err
		}
		if total += l.len(); uint64(total) > r.entries {
			return nil, corrupt(BucketCheckpoints, []byte(r.id), "more content chunks than entries")
		}
		lists[g] = l
	}
	return lists, nil
}

// contentIDs returns the content chunk ids of group g, read from its index
// chunk (aliasing the chunk).
func (r *storedRecord) contentIDs(chunks chunkSource, g int) (idList, error) {
	data, err := chunks.read(r.groups.at(2*g+1), r.id)
	if err == nil && len(data)%8 != 0 {
		err = corrupt(BucketCheckpoints, []byte(r.id), "index chunk "+chunkName(r.groups.at(2*g+1))+" is not a list of ids")
	}
	return idList(data), err
}

// chunkIDs returns the record's distinct chunk ids, sorted: its shape,
// index and message chunks, and the content chunks its index chunks name.
func (r *storedRecord) chunkIDs(chunks chunkSource) ([]uint64, error) {
	lists, err := r.contentLists(chunks)
	if err != nil {
		return nil, err
	}
	ids := make([]uint64, 0, r.groups.len()+r.messages.len())
	for g, content := range lists {
		ids = append(ids, r.groups.at(2*g), r.groups.at(2*g+1))
		for i := range content.len() {
			ids = append(ids, content.at(i))
		}
	}
	for i := range r.messages.len() {
		ids = append(ids, r.messages.at(i))
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// loadRecord reads and decodes the record of id; nil when it is not stored.
func loadRecord(tx kv.Tx, id string) (*storedRecord, error) {
	p, err := get(tx, BucketCheckpoints, []byte(id))
	if p == nil || err != nil {
		return nil, err
	}
	r, err := decodeRecord(p)
	if err != nil {
		return nil, corrupt(BucketCheckpoints, []byte(id), err.Error())
	}
	if r.id != id {
		return nil, corrupt(BucketCheckpoints, []byte(id), "record holds checkpoint "+r.id)
	}
	return r, nil
}

// chunkSource reads chunks: a chunkCursor in a transaction, or a map in
// tests (DecodeRecord).
type chunkSource interface {
	read(id uint64, owner string) ([]byte, error)
}

// checkpoint reassembles the whole checkpoint from its chunks.
func (r *storedRecord) checkpoint(chunks chunkSource) (*chain.Checkpoint, error) {
	cp := &chain.Checkpoint{
		ID: r.id, ThreadID: r.threadID, ParentID: r.parentID, CreatedAt: r.createdAt,
		Reason: chain.Reason(r.reason), Label: r.label, SourceRunID: r.sourceRunID,
		Artifacts: r.artifacts,
	}
	bad := func(why string) error { return corrupt(BucketCheckpoints, []byte(r.id), why) }
	shape, lists := [][]byte{r.shape}, []idList{nil} // an inline manifest
	size := len(r.shape)
	if !r.inline {
		shape = make([][]byte, r.groups.len()/2)
		for g := range shape {
			data, err := chunks.read(r.groups.at(2*g), r.id)
			if err != nil {
				return nil, err
			}
			shape[g], size = data, size+len(data)
		}
		var err error
		if lists, err = r.contentLists(chunks); err != nil {
			return nil, err
		}
	}
	// An entry takes at least 3 bytes of shape: a forged count cannot
	// size the slice beyond what the chunks hold. It is checked at the end.
	cp.Files = make([]chain.Entry, 0, min(r.entries, uint64(size/3)))
	// produced counts what the reassembly has made, in chain.RecordSize's
	// measure; it may not pass fullSize (see decodeRecord).
	produced := uint64(0)
	overBudget := func(n int) bool {
		produced += uint64(n)
		return produced > r.fullSize
	}
	for g, data := range shape {
		content := lists[g]
		cd := Decoder{b: r.content} // an inline manifest's; else read below
		ci := 0
		d := Decoder{b: data}
		for len(d.b) > 0 && d.err == nil {
			if uint64(len(cp.Files)) == r.entries {
				return nil, bad("more entries than its count")
			}
			f := d.entry()
			if f.Kind == chain.KindFile {
				for len(cd.b) == 0 && cd.err == nil && ci < content.len() {
					data, err := chunks.read(content.at(ci), r.id)
					if err != nil {
						return nil, err
					}
					cd, ci = Decoder{b: data}, ci+1
				}
				f.BlobKey = cd.digest(chain.FilePrefix)
				f.Size = int64(cd.Uvarint())
				if cd.err != nil {
					return nil, bad("content chunks: " + cd.err.Error())
				}
			}
			n := 2 + prefixed(len(f.Path)) // as chain.RecordSize counts it
			switch f.Kind {
			case chain.KindFile:
				n += 32 + uvarintSize(uint64(f.Size))
			case chain.KindSymlink:
				n += prefixed(len(f.Target))
			}
			if overBudget(n) {
				return nil, bad("its chunks hold more than its size")
			}
			cp.Files = append(cp.Files, f)
		}
		if err := d.Err(); err != nil {
			return nil, bad("shape chunk: " + err.Error())
		}
		if ci != content.len() || len(cd.b) != 0 {
			return nil, bad("a group's content chunks do not match its files")
		}
	}
	if uint64(len(cp.Files)) != r.entries {
		return nil, bad("chunks do not add up to its entries")
	}
	cp.Conversation = make([]json.RawMessage, r.messages.len())
	for i := range cp.Conversation {
		data, err := chunks.read(r.messages.at(i), r.id)
		if err != nil {
			return nil, err
		}
		if overBudget(prefixed(len(data))) { // checked before the copy
			return nil, bad("its chunks hold more than its size")
		}
		cp.Conversation[i] = append(json.RawMessage{}, data...)
	}
	return cp, nil
}

// blobKeys returns the record's distinct blob keys, sorted, reading only
// the content chunks: reference counting needs the keys, not the paths or
// the messages.
func (r *storedRecord) blobKeys(chunks chunkSource) ([]string, error) {
	type ref struct {
		artifact bool
		sum      [32]byte
	}
	seen := map[ref]struct{}{}
	err := r.forEachContent(chunks, func(data []byte) error {
		d := Decoder{b: data}
		for len(d.b) > 0 {
			var k ref
			copy(k.sum[:], d.Fixed(32))
			d.Uvarint()
			seen[k] = struct{}{}
		}
		if err := d.Err(); err != nil {
			return corrupt(BucketCheckpoints, []byte(r.id), "content chunk: "+err.Error())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(seen)+len(r.artifacts))
	for k := range seen {
		keys = append(keys, chain.FilePrefix+hex.EncodeToString(k.sum[:]))
	}
	for _, a := range r.artifacts {
		keys = append(keys, a.BlobKey)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// forEachContent calls fn with each content chunk of the record, in order,
// or once with the content of an inline manifest.
func (r *storedRecord) forEachContent(chunks chunkSource, fn func(data []byte) error) error {
	if r.inline {
		return fn(r.content)
	}
	lists, err := r.contentLists(chunks)
	if err != nil {
		return err
	}
	for _, content := range lists {
		for i := range content.len() {
			data, err := chunks.read(content.at(i), r.id)
			if err != nil {
				return err
			}
			if err := fn(data); err != nil {
				return err
			}
		}
	}
	return nil
}

// EncodeRecord returns the record payload of a valid checkpoint
// as an append stores it when no chunk id collides, and its chunks by id.
// For tests that forge stored records.
func EncodeRecord(cp *chain.Checkpoint) (record []byte, chunks map[uint64][]byte) {
	p := Prepare(cp)
	chunks = make(map[uint64][]byte, len(p.chunks))
	for _, c := range p.chunks {
		chunks[c.hash] = c.data
	}
	return p.record, chunks
}

// DecodeRecord decodes a record payload (format 2 or 3) and reassembles its
// checkpoint from chunks; it runs the code a store's reads run, without
// the final validation. For tests.
func DecodeRecord(p []byte, chunks map[uint64][]byte) (*chain.Checkpoint, error) {
	r, err := decodeRecord(p)
	if err != nil {
		return nil, err
	}
	return r.checkpoint(chunkMap(chunks))
}

type chunkMap map[uint64][]byte

func (m chunkMap) read(id uint64, owner string) ([]byte, error) {
	if data, ok := m[id]; ok {
		return data, nil
	}
	return nil, corrupt(BucketCheckpoints, []byte(owner), "chunk "+chunkName(id)+" is missing")
}

// DecodeRecordBlobKeys returns the distinct blob keys of a format-2
// record payload as reference counting reads them (content chunks and
// artifacts only: a record whose other chunks are damaged still yields
// them). For tests.
func DecodeRecordBlobKeys(p []byte, chunks map[uint64][]byte) ([]string, error) {
	r, err := decodeRecord(p)
	if err != nil {
		return nil, err
	}
	return r.blobKeys(chunkMap(chunks))
}
