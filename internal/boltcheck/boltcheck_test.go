package boltcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// newDB writes a bbolt file whose bucket spans branch and leaf pages and
// holds an inline nested bucket. It returns the file's bytes, the page size
// and the bucket's root page.
func newDB(t *testing.T) (file []byte, pageSize int, root uint64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o644, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for i := range 1000 {
			if err := b.Put(fmt.Appendf(nil, "key%05d", i), bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
				return err
			}
		}
		nested, err := b.CreateBucket([]byte("nested"))
		if err != nil {
			return err
		}
		return nested.Put([]byte("k"), []byte("v"))
	})
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error { root = uint64(tx.Bucket([]byte("b")).Root()); return nil })
	}
	pageSize = db.Info().PageSize
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if root == 0 {
		t.Fatal("the bucket is inline: the test needs it on pages of its own")
	}
	file, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return file, pageSize, root
}

func TestVerify(t *testing.T) {
	file, pageSize, root := newDB(t)
	verify := func(b []byte) (string, error) { return Verify(bytes.NewReader(b), int64(len(b))) }

	if note, err := verify(file); err != nil || note != "" {
		t.Fatalf("intact file: note %q, err %v", note, err)
	}

	// A damaged page makes an error matching ErrCorrupt that names it.
	damaged := bytes.Clone(file)
	binary.LittleEndian.PutUint16(damaged[int(root)*pageSize+8:], 0x10)
	_, err := verify(damaged)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("page %d has type flags", root)) {
		t.Errorf("damaged page type: %v", err)
	}

	// The file cut short of its high-water mark.
	if _, err := verify(file[:4*pageSize]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated file: %v", err)
	}

	// The older meta page damaged: the file checks out, with a note.
	txid := func(meta int) uint64 { return binary.LittleEndian.Uint64(file[meta*pageSize+16+48:]) }
	older := 0
	if txid(1) < txid(0) {
		older = 1
	}
	damaged = bytes.Clone(file)
	damaged[older*pageSize+16+20] ^= 0xff
	note, err := verify(damaged)
	if err != nil || !strings.Contains(note, fmt.Sprintf("meta page %d did not check out", older)) {
		t.Errorf("older meta page damaged: note %q, err %v", note, err)
	}
}

// syncedDB is newDB with the freelist synced, and some pages freed.
func syncedDB(t *testing.T) (file []byte, pageSize int, freelist uint64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o644, &bolt.Options{FreelistType: bolt.FreelistMapType})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			for i := range 500 {
				if err := b.Put(fmt.Appendf(nil, "key%05d", i), bytes.Repeat([]byte{byte(round)}, 100)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	pageSize = db.Info().PageSize
	db.Close()
	file, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Quick(bytes.NewReader(file), int64(len(file)))
	if err != nil || m.Freelist == NoFreelist {
		t.Fatalf("Quick of an intact file: %+v, %v", m, err)
	}
	return file, pageSize, m.Freelist
}

func TestFreelist(t *testing.T) {
	file, pageSize, fl := syncedDB(t)
	check := func(b []byte) (quick, full error) {
		_, quick = Quick(bytes.NewReader(b), int64(len(b)))
		_, full = Verify(bytes.NewReader(b), int64(len(b)))
		return quick, full
	}
	if q, v := check(file); q != nil || v != nil {
		t.Fatalf("intact file: Quick %v, Verify %v", q, v)
	}
	p := int(fl) * pageSize
	if binary.LittleEndian.Uint16(file[p+10:]) == 0 {
		t.Fatal("the freelist is empty: the test needs free pages")
	}
	// Damage the meta page's checksum cannot see: the freelist page.
	for name, damage := range map[string]func(b []byte){
		"type":         func(b []byte) { b[p+8] = 0x02 },
		"count":        func(b []byte) { binary.LittleEndian.PutUint16(b[p+10:], 0xFFFE) },
		"id too high":  func(b []byte) { binary.LittleEndian.PutUint64(b[p+16:], 1<<40) },
		"id below 2":   func(b []byte) { binary.LittleEndian.PutUint64(b[p+16:], 1) },
		"lists itself": func(b []byte) { binary.LittleEndian.PutUint64(b[p+16:], fl) },
		"lists in use": func(b []byte) {
			// One free page: the root bucket's page.
			m, _ := Quick(bytes.NewReader(file), int64(len(file)))
			binary.LittleEndian.PutUint16(b[p+10:], 1)
			binary.LittleEndian.PutUint64(b[p+16:], m.Root)
		},
	} {
		b := bytes.Clone(file)
		damage(b)
		q, v := check(b)
		if name == "lists in use" {
			// Only a walk of the tree can tell.
			if q != nil || !errors.Is(v, ErrCorrupt) {
				t.Errorf("%s: Quick %v, Verify %v", name, q, v)
			}
			continue
		}
		if !errors.Is(q, ErrCorrupt) || !errors.Is(v, ErrCorrupt) {
			t.Errorf("%s: Quick %v, Verify %v", name, q, v)
		}
	}
}

// VerifyAtPaced reports every page read to pace, and an error from pace
// stops the walk: returned as it is, not as damage.
func TestVerifyAtPaced(t *testing.T) {
	file, _, _ := newDB(t)
	r := bytes.NewReader(file)
	m, err := Quick(r, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	var pages, read int64
	if err := VerifyAtPaced(r, int64(len(file)), m, func(n int64) error { pages++; read += n; return nil }); err != nil {
		t.Fatal(err)
	}
	if pages < 3 || read < pages*int64(m.PageSize) {
		t.Fatalf("pace saw %d pages, %d bytes; want the bucket's branch and leaves", pages, read)
	}
	stop := errors.New("stop")
	calls := 0
	err = VerifyAtPaced(r, int64(len(file)), m, func(int64) error { calls++; return stop })
	if err != stop || errors.Is(err, ErrCorrupt) || calls != 1 {
		t.Fatalf("a walk pace stopped: %v after %d calls; want the pace's error itself after 1", err, calls)
	}
}
