package chain

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"
)

// Stored checkpoints, format 2: a small record and shared chunks.
//
// Consecutive checkpoints of a thread share almost all their manifest and
// conversation. Stored whole, a thread of 200 checkpoints of a 20,000-file
// workspace would repeat a 1.5 MB manifest 200 times and its conversations
// would grow quadratically. So a checkpoint is stored as a record holding
// its header, its artifacts and three lists of chunk ids, and the manifest
// and the messages live in content-addressed chunks (chunks.go) that
// checkpoints share.
//
// The manifest is split into two columns, each cut into chunks at
// boundaries chosen by a hash of the entry's path, so that a boundary does
// not move when a file changes and an inserted or removed entry changes only
// its own chunk:
//
//   - shape chunks hold each entry's kind, flags, path and symlink target:
//     what an edit does not change. They are large (about 128 entries).
//   - content chunks hold each file entry's digest and size: what an edit
//     changes. They are small (2 to 8 files, about 5), because the edits of one
//     turn are spread over the tree: 200 edited files of 20,000 change about
//     200 content chunks, and each costs its own bytes plus nothing else. Four
//     is near the size that minimises a chunk's bytes plus its id in the
//     list (an id costs 8 bytes in every checkpoint, a file 35 in a new chunk).
//
// Each message is one chunk: a conversation grows by appending, so a new
// checkpoint stores only its new messages and one id for each old one.
//
// Record payload (sealed under its checkpoint id in BucketCheckpoints):
//
//	id, threadId, parentId, reason, label, sourceRunId  strings
//	createdAt    varint
//	fullSize     uvarint: RecordSize, what the checkpoint takes stored whole
//	entries      uvarint: number of manifest entries
//	shape        count uvarint, then count chunk ids, 8 bytes big-endian each
//	content      count, ids
//	artifacts    count, then artifactId, name, mimeType, 32-byte digest,
//	             size uvarint, createdAt varint (as in EncodeCheckpoint)
//	messages     count, ids: one chunk per message, in order
//
//	shape chunk    per entry: kind byte ('f','d','l'), flags byte (bit 0
//	               executable), path string; a symlink adds its target
//	content chunk  per file entry: 32-byte digest, size uvarint
//	message chunk  the message's bytes
//
// The ids in a record are addresses, not claims: a chunk is stored under
// the xxhash64 of its bytes, or the next free id after it when another
// chunk holds that one (chunkCursor.store compares the bytes), so a collision
// never makes a record name another record's data.

const (
	shapeMask = 127 // a shape chunk ends after a path whose hash has these bits 0
	// A content chunk ends likewise, on other bits of the hash, but holds
	// from minContent to maxContent files. Without the bounds the sizes
	// are geometric, and an edited file most often lands in a long chunk:
	// the chunk holding a random file averaged 7 files, not 4.
	contentMask = 3
	minContent  = 2
	maxContent  = 8
	// maxChunkBytes ends a shape chunk whatever the hashes say: a run of
	// paths without a boundary must not make one chunk of the manifest.
	maxChunkBytes = 64 << 10
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
	cp       *Checkpoint
}

type preparedChunk struct {
	hash uint64 // xxhash64 of data: the id unless it collides
	sum  uint64 // the seal checksum of data under id hash
	slot int    // offset of the chunk's id in record
	data []byte // aliases the checkpoint or a column buffer
}

// Prepare encodes a valid checkpoint for PutPrepared.
func Prepare(cp *Checkpoint) *Prepared {
	p := &Prepared{ID: cp.ID, cp: cp}
	p.index = indexKey(cp.ThreadID, cp.CreatedAt, cp.ID)
	p.indexVal = Seal(BucketThreadIndex, p.index, nil)

	shape, content := splitManifest(cp.Files)
	msgs := make([][]byte, len(cp.Conversation))
	for i, m := range cp.Conversation {
		msgs[i] = m
	}
	n := 3*binary.MaxVarintLen64 + 8*(len(shape)+len(content)+len(msgs))
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
	e.Uvarint(uint64(RecordSize(cp)))
	e.Uvarint(uint64(len(cp.Files)))
	p.chunks = make([]preparedChunk, 0, len(shape)+len(content)+len(msgs))
	p.addList(e, shape)
	p.addList(e, content)
	encodeArtifacts(e, cp.Artifacts)
	p.addList(e, msgs)
	p.record = e.b
	// bbolt keeps a node's keys in a slice and inserts into it by copying
	// what follows: a million new chunks in random order made the first
	// append of a million-entry manifest quadratic (217 s). In key order,
	// each lands at the end.
	p.order = make([]int32, len(p.chunks))
	for i := range p.order {
		p.order[i] = int32(i)
	}
	slices.SortFunc(p.order, func(a, b int32) int { return cmp.Compare(p.chunks[a].hash, p.chunks[b].hash) })
	return p
}

// addList appends a chunk list to the record being encoded.
func (p *Prepared) addList(e *Encoder, chunks [][]byte) {
	e.Uvarint(uint64(len(chunks)))
	var k [8]byte
	for _, data := range chunks {
		h := xxhash.Sum64(data)
		binary.BigEndian.PutUint64(k[:], h)
		p.chunks = append(p.chunks, preparedChunk{hash: h, sum: sum(BucketChunks, k[:], data), slot: len(e.b), data: data})
		e.b = binary.BigEndian.AppendUint64(e.b, h)
	}
}

// splitManifest encodes the shape and content columns of files, each in
// one buffer sized first, and cuts them into chunks (slices of those
// buffers): a manifest may hold a million entries.
func splitManifest(files []Entry) (shape, content [][]byte) {
	sn, cn := 0, 0
	for i := range files {
		f := &files[i]
		sn += 2 + prefixed(len(f.Path))
		switch f.Kind {
		case KindFile:
			cn += 32 + uvarintSize(uint64(f.Size))
		case KindSymlink:
			sn += prefixed(len(f.Target))
		}
	}
	s, c := make([]byte, 0, sn), make([]byte, 0, cn)
	sStart, cStart := 0, 0
	n := 0 // files in the content chunk being cut
	for i := range files {
		f := &files[i]
		var flags byte
		if f.Executable {
			flags |= flagExecutable
		}
		h := xxhash.Sum64String(f.Path)
		switch f.Kind {
		case KindFile:
			s = append(s, 'f', flags)
			c = appendDigest(c, f.BlobKey, FilePrefix)
			c = binary.AppendUvarint(c, uint64(f.Size))
			if n++; n >= minContent && (h>>32)&contentMask == 0 || n == maxContent {
				content, cStart, n = append(content, c[cStart:]), len(c), 0
			}
		case KindDir:
			s = append(s, 'd', flags)
		case KindSymlink:
			s = append(s, 'l', flags)
		}
		s = binary.AppendUvarint(s, uint64(len(f.Path)))
		s = append(s, f.Path...)
		if f.Kind == KindSymlink {
			s = binary.AppendUvarint(s, uint64(len(f.Target)))
			s = append(s, f.Target...)
		}
		if h&shapeMask == 0 || len(s)-sStart >= maxChunkBytes {
			shape, sStart = append(shape, s[sStart:]), len(s)
		}
	}
	if len(s) > sStart {
		shape = append(shape, s[sStart:])
	}
	if len(c) > cStart {
		content = append(content, c[cStart:])
	}
	return shape, content
}

func encodeArtifacts(e *Encoder, arts []Artifact) {
	e.Uvarint(uint64(len(arts)))
	for i := range arts {
		a := &arts[i]
		e.String(a.ArtifactID)
		e.String(a.Name)
		e.String(a.MimeType)
		e.digest(a.BlobKey, ArtifactPrefix)
		e.Uvarint(uint64(a.Size))
		e.Varint(a.CreatedAt)
	}
}

func decodeArtifacts(d *Decoder) []Artifact {
	arts := make([]Artifact, d.Count(36))
	for i := range arts {
		a := &arts[i]
		a.ArtifactID, a.Name, a.MimeType = d.String(), d.String(), d.String()
		a.BlobKey = d.digest(ArtifactPrefix)
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
	shape, content, messages   idList
	artifacts                  []Artifact
}

// idList is a run of 8-byte big-endian chunk ids.
type idList []byte

func (l idList) len() int         { return len(l) / 8 }
func (l idList) at(i int) uint64  { return binary.BigEndian.Uint64(l[8*i:]) }
func (d *Decoder) idList() idList { return idList(d.Fixed(8 * d.Count(8))) }
func (l idList) all() []uint64 {
	out := make([]uint64, l.len())
	for i := range out {
		out[i] = l.at(i)
	}
	return out
}

func decodeRecord(p []byte) (*storedRecord, error) {
	d := NewDecoder(p)
	r := &storedRecord{}
	r.id, r.threadID, r.parentID = d.String(), d.String(), d.String()
	r.reason, r.label, r.sourceRunID = d.String(), d.String(), d.String()
	r.createdAt = d.Varint()
	r.fullSize = d.Uvarint()
	r.entries = d.Uvarint()
	r.shape = d.idList()
	r.content = d.idList()
	r.artifacts = decodeArtifacts(d)
	r.messages = d.idList()
	if err := d.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

// chunkIDs returns the record's distinct chunk ids, sorted.
func (r *storedRecord) chunkIDs() []uint64 {
	ids := make([]uint64, 0, r.shape.len()+r.content.len()+r.messages.len())
	for _, l := range []idList{r.shape, r.content, r.messages} {
		for i := range l.len() {
			ids = append(ids, l.at(i))
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// loadRecord reads and decodes the record of id; nil when it is not stored.
func loadRecord(tx *bolt.Tx, id string) (*storedRecord, error) {
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
func (r *storedRecord) checkpoint(chunks chunkSource) (*Checkpoint, error) {
	cp := &Checkpoint{
		ID: r.id, ThreadID: r.threadID, ParentID: r.parentID, CreatedAt: r.createdAt,
		Reason: Reason(r.reason), Label: r.label, SourceRunID: r.sourceRunID,
		Artifacts: r.artifacts,
	}
	bad := func(why string) error { return corrupt(BucketCheckpoints, []byte(r.id), why) }
	shape := make([][]byte, r.shape.len())
	size := 0
	for i := range shape {
		data, err := chunks.read(r.shape.at(i), r.id)
		if err != nil {
			return nil, err
		}
		shape[i], size = data, size+len(data)
	}
	// An entry takes at least 3 bytes of shape: a forged count cannot
	// size the slice beyond what the chunks hold. It is checked at the end.
	cp.Files = make([]Entry, 0, min(r.entries, uint64(size/3)))
	var cd Decoder
	ci := 0
	for _, data := range shape {
		d := Decoder{b: data}
		for len(d.b) > 0 && d.err == nil {
			if uint64(len(cp.Files)) == r.entries {
				return nil, bad("more entries than its count")
			}
			var f Entry
			kind, flags := d.Byte(), d.Byte()
			f.Path = d.String()
			f.Executable = flags&flagExecutable != 0
			switch kind {
			case 'f':
				f.Kind = KindFile
				for len(cd.b) == 0 && cd.err == nil && ci < r.content.len() {
					data, err := chunks.read(r.content.at(ci), r.id)
					if err != nil {
						return nil, err
					}
					cd, ci = Decoder{b: data}, ci+1
				}
				f.BlobKey = cd.digest(FilePrefix)
				f.Size = int64(cd.Uvarint())
				if cd.err != nil {
					return nil, bad("content chunks: " + cd.err.Error())
				}
			case 'd':
				f.Kind = KindDir
			case 'l':
				f.Kind = KindSymlink
				f.Target = d.String()
			default:
				d.fail("entry kind")
			}
			cp.Files = append(cp.Files, f)
		}
		if err := d.Err(); err != nil {
			return nil, bad("shape chunk: " + err.Error())
		}
	}
	if uint64(len(cp.Files)) != r.entries || ci != r.content.len() || len(cd.b) != 0 {
		return nil, bad("chunks do not add up to its entries")
	}
	cp.Conversation = make([]json.RawMessage, r.messages.len())
	for i := range cp.Conversation {
		data, err := chunks.read(r.messages.at(i), r.id)
		if err != nil {
			return nil, err
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
	for i := range r.content.len() {
		data, err := chunks.read(r.content.at(i), r.id)
		if err != nil {
			return nil, err
		}
		d := Decoder{b: data}
		for len(d.b) > 0 {
			var k ref
			copy(k.sum[:], d.Fixed(32))
			d.Uvarint()
			seen[k] = struct{}{}
		}
		if err := d.Err(); err != nil {
			return nil, corrupt(BucketCheckpoints, []byte(r.id), "content chunk: "+err.Error())
		}
	}
	keys := make([]string, 0, len(seen)+len(r.artifacts))
	for k := range seen {
		keys = append(keys, FilePrefix+hex.EncodeToString(k.sum[:]))
	}
	for _, a := range r.artifacts {
		keys = append(keys, a.BlobKey)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// EncodeRecord returns the format-2 record payload of a valid checkpoint
// as an append stores it when no chunk id collides, and its chunks by id.
// For tests that forge stored records.
func EncodeRecord(cp *Checkpoint) (record []byte, chunks map[uint64][]byte) {
	p := Prepare(cp)
	chunks = make(map[uint64][]byte, len(p.chunks))
	for _, c := range p.chunks {
		chunks[c.hash] = c.data
	}
	return p.record, chunks
}

// DecodeRecord decodes a format-2 record payload and reassembles its
// checkpoint from chunks; it runs the code a store's reads run, without
// the final validation. For tests.
func DecodeRecord(p []byte, chunks map[uint64][]byte) (*Checkpoint, error) {
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
