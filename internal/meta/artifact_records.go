package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// ArtifactRecord is the stored form of an artifact record (bucket
// artifact_records), indexed by run and by thread. Its blob, when BlobKey
// is set, is held (holds.go) while the record exists.
type ArtifactRecord struct {
	ArtifactID, RunID, ThreadID string
	BlobKey                     string // "" when none
	Name, MimeType, SourceURL   string
	Size, CreatedAt             int64
}

func encodeArtifactRecord(r *ArtifactRecord) []byte {
	e := &Encoder{}
	for _, s := range []string{r.ArtifactID, r.RunID, r.ThreadID, r.BlobKey, r.Name, r.MimeType, r.SourceURL} {
		e.String(s)
	}
	e.Varint(r.Size)
	e.Varint(r.CreatedAt)
	return e.Bytes()
}

func decodeArtifactRecord(key, p []byte) (*ArtifactRecord, error) {
	d := NewDecoder(p)
	r := &ArtifactRecord{ArtifactID: d.String(), RunID: d.String(), ThreadID: d.String(), BlobKey: d.String(),
		Name: d.String(), MimeType: d.String(), SourceURL: d.String(), Size: d.Varint(), CreatedAt: d.Varint()}
	if err := d.Err(); err != nil {
		return nil, corrupt(BucketArtifactRecords, key, "malformed artifact record: "+err.Error())
	}
	if r.ArtifactID != string(key) {
		return nil, corrupt(BucketArtifactRecords, key, "record holds artifact "+r.ArtifactID)
	}
	return r, nil
}

// artifactIndexKey is the key of a record in the run or thread index:
// <owner> 0x00 be64(createdAt xor 1<<63) <artifactId>. Identifiers never
// contain NUL, so <owner> 0x00 is an exact prefix of one owner's keys, and
// the keys sort by createdAt, then id bytes.
func artifactIndexKey(owner string, createdAt int64, id string) []byte {
	return indexKey(owner, createdAt, id)
}

// GetArtifactRecord returns the record of artifactID, or nil when there is
// none.
func GetArtifactRecord(tx kv.Tx, artifactID string) (*ArtifactRecord, error) {
	p, err := get(tx, BucketArtifactRecords, []byte(artifactID))
	if p == nil || err != nil {
		return nil, err
	}
	return decodeArtifactRecord([]byte(artifactID), p)
}

// HeldKey is the blob the record holds for the garbage collector: its
// BlobKey when that is content-addressed, else "" (a plain object's key:
// the object holds its own bytes).
func (r *ArtifactRecord) HeldKey() string {
	if strings.HasPrefix(r.BlobKey, chain.FilePrefix) || strings.HasPrefix(r.BlobKey, chain.ArtifactPrefix) {
		return r.BlobKey
	}
	return ""
}

// PutArtifactRecord stores r, replacing the record of the same id: its
// index keys are moved and the hold moves from the old blob key to the new
// one.
func PutArtifactRecord(tx kv.Tx, r *ArtifactRecord) error {
	if _, err := DeleteArtifactRecord(tx, r.ArtifactID); err != nil {
		return err
	}
	if k := r.HeldKey(); k != "" {
		if err := AddHold(tx, k, 1); err != nil {
			return err
		}
	}
	empty := []byte{}
	for _, ix := range []struct {
		name  []byte
		owner string
	}{{BucketArtifactRuns, r.RunID}, {BucketArtifactThreads, r.ThreadID}} {
		if err := put(tx, ix.name, artifactIndexKey(ix.owner, r.CreatedAt, r.ArtifactID), empty); err != nil {
			return err
		}
	}
	return put(tx, BucketArtifactRecords, []byte(r.ArtifactID), encodeArtifactRecord(r))
}

// DeleteArtifactRecord removes the record of artifactID, its index keys
// and its hold, and reports whether there was one.
func DeleteArtifactRecord(tx kv.Tx, artifactID string) (bool, error) {
	old, err := GetArtifactRecord(tx, artifactID)
	if old == nil || err != nil {
		return false, err
	}
	if k := old.HeldKey(); k != "" {
		if err := AddHold(tx, k, -1); err != nil {
			return false, err
		}
	}
	if err := bucket(tx, BucketArtifactRuns).Delete(artifactIndexKey(old.RunID, old.CreatedAt, old.ArtifactID)); err != nil {
		return false, err
	}
	if err := bucket(tx, BucketArtifactThreads).Delete(artifactIndexKey(old.ThreadID, old.CreatedAt, old.ArtifactID)); err != nil {
		return false, err
	}
	return true, bucket(tx, BucketArtifactRecords).Delete([]byte(artifactID))
}

// ArtifactRecordsOfRun returns the records of a run by createdAt, then
// artifactId bytes.
func ArtifactRecordsOfRun(tx kv.Tx, runID string) ([]*ArtifactRecord, error) {
	return artifactRecordsOf(tx, BucketArtifactRuns, runID, func(r *ArtifactRecord) string { return r.RunID })
}

// ArtifactRecordsOfThread returns the records of a thread by createdAt,
// then artifactId bytes.
func ArtifactRecordsOfThread(tx kv.Tx, threadID string) ([]*ArtifactRecord, error) {
	return artifactRecordsOf(tx, BucketArtifactThreads, threadID, func(r *ArtifactRecord) string { return r.ThreadID })
}

// artifactRecordsOf reads the records one owner's index keys name, each
// checked against its key: a key naming a missing record, or one of
// another owner or time, is damage.
func artifactRecordsOf(tx kv.Tx, index []byte, owner string, ownerOf func(*ArtifactRecord) string) ([]*ArtifactRecord, error) {
	out := []*ArtifactRecord{}
	prefix := threadPrefix(owner)
	c := bucket(tx, index).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if _, err := Unseal(index, k, v); err != nil {
			return nil, err
		}
		if len(k) < len(prefix)+8+1 {
			return nil, corrupt(index, k, "short index key")
		}
		createdAt := int64(binary.BigEndian.Uint64(k[len(prefix):]) ^ 1<<63)
		id := string(k[len(prefix)+8:])
		r, err := GetArtifactRecord(tx, id)
		if err != nil {
			return nil, err
		}
		if r == nil || ownerOf(r) != owner || r.CreatedAt != createdAt {
			return nil, corrupt(index, k, "index key does not match artifact record "+id)
		}
		out = append(out, r)
	}
	return out, nil
}

// ThreadHasArtifactRecords reports whether the thread has any artifact
// record.
func ThreadHasArtifactRecords(tx kv.Tx, threadID string) bool {
	prefix := threadPrefix(threadID)
	k, _ := bucket(tx, BucketArtifactThreads).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// ForEachArtifactRecord calls fn with every artifact record in id order; a
// record that does not unseal or decode is passed as its error, with a
// nil record.
func ForEachArtifactRecord(tx kv.Tx, fn func(id string, r *ArtifactRecord, err error) error) error {
	return bucket(tx, BucketArtifactRecords).ForEach(func(k, v []byte) error {
		var r *ArtifactRecord
		p, err := Unseal(BucketArtifactRecords, k, v)
		if err == nil {
			r, err = decodeArtifactRecord(k, p)
		}
		return fn(string(k), r, err)
	})
}

// CheckArtifactIndexes compares the run and thread indexes with the
// records: each decodable record has exactly its two index keys, and each
// index key names a record of its owner and time. It describes each
// difference (records that do not decode are CountHolds's to report).
func CheckArtifactIndexes(tx kv.Tx) ([]RecordProblem, error) {
	var out []RecordProblem
	records := map[string]*ArtifactRecord{}
	err := ForEachArtifactRecord(tx, func(id string, r *ArtifactRecord, err error) error {
		if err == nil {
			records[id] = r
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, ix := range []struct {
		name    []byte
		ownerOf func(*ArtifactRecord) string
	}{
		{BucketArtifactRuns, func(r *ArtifactRecord) string { return r.RunID }},
		{BucketArtifactThreads, func(r *ArtifactRecord) string { return r.ThreadID }},
	} {
		seen := map[string]bool{}
		err := bucket(tx, ix.name).ForEach(func(k, v []byte) error {
			problem := func(detail string) {
				out = append(out, RecordProblem{Bucket: string(ix.name), Key: string(k), Detail: detail})
			}
			if _, err := Unseal(ix.name, k, v); err != nil {
				problem(err.Error())
				return nil
			}
			i := bytes.IndexByte(k, 0)
			if i < 0 || len(k) < i+1+8+1 {
				problem("malformed index key")
				return nil
			}
			owner, id := string(k[:i]), string(k[i+9:])
			createdAt := int64(binary.BigEndian.Uint64(k[i+1:i+9]) ^ 1<<63)
			r, ok := records[id]
			switch {
			case !ok:
				problem(fmt.Sprintf("names artifact record %q, which is not stored", id))
			case ix.ownerOf(r) != owner || r.CreatedAt != createdAt:
				problem(fmt.Sprintf("names artifact record %q under %q at %d; the record says %q at %d", id, owner, createdAt, ix.ownerOf(r), r.CreatedAt))
			case seen[id]:
				problem(fmt.Sprintf("names artifact record %q twice", id))
			}
			seen[id] = true
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, id := range slices.Sorted(maps.Keys(records)) {
			if !seen[id] {
				out = append(out, RecordProblem{Bucket: string(ix.name), Key: id, Detail: "artifact record is not indexed"})
			}
		}
	}
	return out, nil
}
