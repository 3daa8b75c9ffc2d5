package boltcheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A clean close is recorded in a file beside the database, so that the
// next Open need not walk every page (Verify) before it returns. The record
// names the database file as a writable handle's Close left it: its
// identity and times as stat reports them (device, inode, size,
// modification and change times in nanoseconds) and the meta page bbolt
// opens it at (transaction id, checksum, root, freelist, high-water mark).
// A sha256 of those fields seals it, against a torn or damaged write.
//
// Open trusts the record only while all of it still holds: the record
// checks out, the file's stat matches field for field, both meta pages are
// valid and the newer one is the recorded one, and the freelist page the
// meta names is well formed (Quick). A write(2) to the file
// after the close moves its change time, a copy or a compaction makes
// another inode, and any commit by any bbolt moves the meta page.
// Otherwise Open verifies every page, as after a crash.
//
// The record is no proof that the pages are intact: a write through a
// shared mapping of the file moves no time on some file systems (tmpfs),
// and a disk's own damage moves nothing. So trusting it defers the walk
// rather than skipping it: a writable Open starts it in the background,
// and no write transaction begins before it ends (engine/cleanclose_walk.go). A
// read-only Open, which never writes, does not walk.
//
// Invariants that make the record mean "this file is as a verified
// session left it":
//   - a writable Open removes the record before bbolt opens the file
//     (bbolt may commit inside its Open), so a process killed while it
//     holds the store leaves no record. The removal need not be durable:
//     a record that survives a crash still names the meta page of its
//     close, which the first commit after it replaced;
//   - Close writes one only for a writable handle whose session began with
//     a verified file or a trusted record, saw no damaged page (the engine's DB.tx),
//     was not poisoned, and still has the file it opened at the path (a
//     Compact renames another over it); after its last commit, which
//     writes bbolt's freelist (the engine's closeFreelist), so that the meta page it
//     records names one. It makes the file durable first;
//   - a read-only handle neither removes nor writes one.
const CleanCloseName = "sbx.clean"

// cleanCloseVersion opens every record; a record of another version is not
// trusted.
const cleanCloseVersion = "sbxdb clean close 1"

// FileStat is what a record remembers of the database file's stat.
type FileStat struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds since the epoch
}

// cleanClose is a record's content.
type cleanClose struct {
	file FileStat
	meta Meta
}

// EncodeCleanClose returns the record of a clean close of the database
// file whose stat is file and whose newest meta page is m.
func EncodeCleanClose(file FileStat, m Meta) []byte {
	return cleanClose{file: file, meta: m}.encode()
}

// encode returns the record's bytes: one line of fields and one line with
// their sha256.
func (c cleanClose) encode() []byte {
	m := c.meta
	body := fmt.Appendf(nil, "%s dev=%d ino=%d size=%d mtime=%d ctime=%d pagesize=%d root=%d freelist=%d hwm=%d txid=%d metasum=%d\n",
		cleanCloseVersion, c.file.dev, c.file.ino, c.file.size, c.file.mtime, c.file.ctime,
		m.PageSize, m.Root, m.Freelist, m.HWM, m.TxID, m.Checksum)
	sum := sha256.Sum256(body)
	return fmt.Appendf(body, "sha256=%s\n", hex.EncodeToString(sum[:]))
}

// decodeCleanClose parses a record, and accepts it only if encoding what
// it parsed gives back its exact bytes.
func decodeCleanClose(b []byte) (cleanClose, bool) {
	var c cleanClose
	m := &c.meta
	_, err := fmt.Sscanf(string(b), cleanCloseVersion+" dev=%d ino=%d size=%d mtime=%d ctime=%d pagesize=%d root=%d freelist=%d hwm=%d txid=%d metasum=%d\n",
		&c.file.dev, &c.file.ino, &c.file.size, &c.file.mtime, &c.file.ctime,
		&m.PageSize, &m.Root, &m.Freelist, &m.HWM, &m.TxID, &m.Checksum)
	if err != nil || !bytes.Equal(c.encode(), b) {
		return cleanClose{}, false
	}
	return c, true
}

// TrustCleanClose reports whether dir's record of a clean close vouches
// for the open database file f: see CleanCloseName.
func TrustCleanClose(dir string, f *os.File) bool {
	b, err := readSmall(filepath.Join(dir, CleanCloseName), 1024)
	if err != nil {
		return false
	}
	rec, ok := decodeCleanClose(b)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := StatOf(fi)
	if !ok || st != rec.file {
		return false
	}
	m, err := Quick(f, fi.Size())
	return err == nil && m == rec.meta && m.Freelist != NoFreelist
}

// readSmall reads a file of at most limit bytes; a longer one is an error.
func readSmall(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, limit+1)
	n, err := f.ReadAt(b, 0)
	if n > int(limit) {
		return nil, errors.New("too long")
	}
	if n == 0 && err != nil {
		return nil, err
	}
	return b[:n], nil
}

// RemoveCleanClose removes dir's record of a clean close, if any.
func RemoveCleanClose(dir string) error {
	err := os.Remove(filepath.Join(dir, CleanCloseName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sbxdb: removing the record of a clean close: %w", err)
	}
	return nil
}

// WriteCleanClose records a clean close of the database file at path,
// which bbolt has closed: only if it is still the file opened (opened) and
// its newest meta page is the transaction the handle last saw (txid). sync
// makes the file durable first (a store opened with NoSync). Failing to
// write the record is not an error of Close: the next Open verifies.
func WriteCleanClose(dir, path string, opened FileStat, txid uint64, sync bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if sync && f.Sync() != nil {
		return
	}
	fi, err := f.Stat()
	if err != nil {
		return
	}
	st, ok := StatOf(fi)
	if !ok || st.dev != opened.dev || st.ino != opened.ino {
		return
	}
	m, err := Quick(f, fi.Size())
	if err != nil || m.TxID != txid || m.Freelist == NoFreelist {
		return
	}
	name := filepath.Join(dir, CleanCloseName)
	tmp := name + ".tmp"
	if os.WriteFile(tmp, cleanClose{file: st, meta: m}.encode(), 0o644) != nil || os.Rename(tmp, name) != nil {
		os.Remove(tmp)
	}
}
