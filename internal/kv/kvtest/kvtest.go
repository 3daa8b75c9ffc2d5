// Package kvtest is the conformance suite of the kv model: what every
// backend of internal/kv must do the same, run on each by its tests.
package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sbxdb/sbxdb/internal/kv"
)

// Func runs fn in a transaction of a store: a read one (view) or a write
// one (update).
type Func = func(fn func(kv.Tx) error) error

// Open returns a new, empty store. The store must let an update commit
// while a view is open, from the view's goroutine (the snapshot case does
// that); it is closed by t's cleanup.
type Open func(t *testing.T) (view, update Func)

// Run runs every case of the suite, each on a store of its own.
func Run(t *testing.T, open Open) {
	cases := []struct {
		name string
		fn   func(t *testing.T, view, update Func)
	}{
		{"AbsentVsEmpty", testAbsentVsEmpty},
		{"ByteOrder", testByteOrder},
		{"ManyKeys", testManyKeys},
		{"Seek", testSeek},
		{"SeekWalk", testSeekWalk},
		{"CursorDelete", testCursorDelete},
		{"ForEachStops", testForEachStops},
		{"Sequences", testSequences},
		{"Buckets", testBuckets},
		{"KeyErrors", testKeyErrors},
		{"ReadOnly", testReadOnly},
		{"Rollback", testRollback},
		{"Snapshot", testSnapshot},
		{"OwnWrites", testOwnWrites},
		{"KeyBufferReuse", testKeyBufferReuse},
		{"LargeValue", testLargeValue},
		{"GetMany", testGetMany},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			view, update := open(t)
			c.fn(t, view, update)
		})
	}
}

var errStop = errors.New("kvtest: stop")

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// put writes kvs (key, value, key, value...) into bucket name, creating
// it.
func put(t *testing.T, update Func, name string, kvs ...[]byte) {
	t.Helper()
	must(t, update(func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		for i := 0; i < len(kvs); i += 2 {
			if err := b.Put(kvs[i], kvs[i+1]); err != nil {
				return fmt.Errorf("put %q: %w", short(kvs[i]), err)
			}
		}
		return nil
	}))
}

// keys returns bucket name's keys by First/Next, checking that ForEach
// gives the same keys and values.
func keys(t *testing.T, tx kv.Tx, name string) [][]byte {
	t.Helper()
	b := tx.Bucket([]byte(name))
	if b == nil {
		t.Fatalf("bucket %q missing", name)
	}
	var ks, vs [][]byte
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		ks = append(ks, k)
		vs = append(vs, v)
	}
	i := 0
	err := b.ForEach(func(k, v []byte) error {
		if i >= len(ks) || !bytes.Equal(k, ks[i]) || !bytes.Equal(v, vs[i]) {
			return fmt.Errorf("ForEach's %dth pair %q differs from the cursor's", i, short(k))
		}
		i++
		return nil
	})
	must(t, err)
	if i != len(ks) {
		t.Fatalf("ForEach gave %d keys, the cursor %d", i, len(ks))
	}
	return ks
}

// short abbreviates a long key for messages.
func short(k []byte) string {
	if len(k) <= 40 {
		return fmt.Sprintf("%x", k)
	}
	return fmt.Sprintf("%x...(%d bytes)...%x", k[:16], len(k), k[len(k)-8:])
}

func testAbsentVsEmpty(t *testing.T, view, update Func) {
	put(t, update, "b", []byte("empty"), []byte{}, []byte("full"), []byte("x"))
	check := func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		if v := b.Get([]byte("absent")); v != nil {
			t.Errorf("absent key: Get = %q, want nil", v)
		}
		if v := b.Get([]byte("empty")); v == nil || len(v) != 0 {
			t.Errorf("empty value: Get = %#v, want non-nil and empty", v)
		}
		if v := b.Get([]byte("full")); string(v) != "x" {
			t.Errorf("Get(full) = %q", v)
		}
		k, v := b.Cursor().First()
		if string(k) != "empty" || v == nil || len(v) != 0 {
			t.Errorf("cursor on the empty value: %q %#v, want non-nil and empty", k, v)
		}
		return nil
	}
	must(t, view(check))
	must(t, update(check))
}

// orderKeys are keys whose byte order is easy to get wrong: 0x00 and 0xff,
// prefixes of each other, and long keys (a btree index entry holds about
// 2.7 KB; bbolt's limit is 32 KiB) sharing long prefixes, with lengths
// around every power of two up to the limit.
func orderKeys() [][]byte {
	ks := [][]byte{
		{0x00}, {0x00, 0x00}, {0x00, 0x01}, {0x00, 0xff}, {0x01}, {0x7f}, {0x80},
		{0xff}, {0xff, 0x00}, {0xff, 0xff}, {0xff, 0xff, 0xff},
		[]byte("a"), []byte("ab"), []byte("abc"), []byte("abd"), []byte("b"),
	}
	long := bytes.Repeat([]byte("x"), kv.MaxKeySize)
	for _, n := range []int{255, 256, 257, 1000, 1023, 1024, 1025, 2000, 2700, 2800, 3000, 3001, 4096, 8192, 16384, kv.MaxKeySize - 1} {
		p := long[:n]
		ks = append(ks, p,
			append(slices.Clone(p), 0x00),
			append(slices.Clone(p), 0x01),
			append(slices.Clone(p), 0xff),
			append(slices.Clone(p), 0x00, 0xff),
			append(append(slices.Clone(p[:n-1]), 'w'), 0xff), // sorts before p
		)
	}
	ks = append(ks, long)
	// Keys differing only past 3000 bytes, and one differing at its first.
	base := bytes.Repeat([]byte{0xab}, 3500)
	for _, i := range []int{3000, 3001, 3499} {
		for _, c := range []byte{0x00, 0x55, 0xff} {
			k := slices.Clone(base)
			k[i] = c
			ks = append(ks, k)
		}
	}
	ks = append(ks, base)
	ks = slices.DeleteFunc(ks, func(k []byte) bool { return len(k) > kv.MaxKeySize })
	slices.SortFunc(ks, bytes.Compare)
	return slices.CompactFunc(ks, bytes.Equal)
}

func testByteOrder(t *testing.T, view, update Func) {
	want := orderKeys()
	shuffled := slices.Clone(want)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) {
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	})
	var kvs [][]byte
	for _, k := range shuffled {
		kvs = append(kvs, k, fmt.Appendf(nil, "v%d", len(k)))
	}
	put(t, update, "b", kvs...)
	must(t, view(func(tx kv.Tx) error {
		got := keys(t, tx, "b")
		if len(got) != len(want) {
			t.Fatalf("%d keys, want %d", len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("key %d is %s, want %s", i, short(got[i]), short(want[i]))
			}
		}
		b := tx.Bucket([]byte("b"))
		for _, k := range want {
			if v := b.Get(k); string(v) != fmt.Sprintf("v%d", len(k)) {
				t.Fatalf("Get(%s) = %q", short(k), v)
			}
		}
		// A long key's neighbour sharing its whole prefix is not it.
		if v := b.Get(append(bytes.Repeat([]byte{0xab}, 3499), 0x01)); v != nil {
			t.Fatalf("Get of an absent long key = %q", v)
		}
		return nil
	}))
}

// testManyKeys crosses any batching a cursor does.
func testManyKeys(t *testing.T, view, update Func) {
	const n = 1500
	var kvs [][]byte
	for i := range n {
		kvs = append(kvs, fmt.Appendf(nil, "k%05d", i), fmt.Appendf(nil, "v%d", i))
	}
	put(t, update, "b", kvs...)
	must(t, view(func(tx kv.Tx) error {
		got := keys(t, tx, "b")
		if len(got) != n {
			t.Fatalf("%d keys, want %d", len(got), n)
		}
		for i, k := range got {
			if string(k) != fmt.Sprintf("k%05d", i) {
				t.Fatalf("key %d is %q", i, k)
			}
		}
		n, err := kv.Count(tx.Bucket([]byte("b")))
		if err != nil || n != len(got) {
			t.Fatalf("Count = %d, %v", n, err)
		}
		return nil
	}))
}

// testSeekWalk walks one cursor over 1,500 even-numbered keys with Seeks to
// ascending targets, present and absent, near and far (the way cas looks
// up many keys), mixed with Nexts, in a read and in a write transaction:
// each lands on the first key at or after its target.
func testSeekWalk(t *testing.T, view, update Func) {
	const n = 1500
	var kvs [][]byte
	for i := range n {
		kvs = append(kvs, fmt.Appendf(nil, "k%05d", 2*i), fmt.Appendf(nil, "v%d", 2*i))
	}
	put(t, update, "b", kvs...)
	walk := func(tx kv.Tx) error {
		c := tx.Bucket([]byte("b")).Cursor()
		c.First()
		for target := 1; target < 2*n+10; target += 1 + target%37 {
			k, v := c.Seek(fmt.Appendf(nil, "k%05d", target))
			want := target + target%2 // the next even number
			if want >= 2*n {
				if k != nil {
					t.Fatalf("Seek(k%05d) = %q, want past the end", target, k)
				}
				c.First()
				continue
			}
			if string(k) != fmt.Sprintf("k%05d", want) || string(v) != fmt.Sprintf("v%d", want) {
				t.Fatalf("Seek(k%05d) = %q %q, want k%05d", target, k, v, want)
			}
			if target%5 == 0 {
				if k, _ := c.Next(); want+2 < 2*n && string(k) != fmt.Sprintf("k%05d", want+2) {
					t.Fatalf("Next after k%05d = %q", want, k)
				}
			}
		}
		return nil
	}
	must(t, view(walk))
	must(t, update(walk))
}

func testSeek(t *testing.T, view, update Func) {
	ks := orderKeys()
	var kvs [][]byte
	for _, k := range ks {
		kvs = append(kvs, k, []byte{1})
	}
	put(t, update, "b", kvs...)
	put(t, update, "empty")
	probes := slices.Clone(ks)
	for _, k := range ks {
		// Just after k, just before k, k extended past the longest key.
		probes = append(probes, append(slices.Clone(k), 0x00))
		if k[len(k)-1] > 0 {
			p := slices.Clone(k)
			p[len(p)-1]--
			probes = append(probes, p)
		}
	}
	probes = append(probes, nil, []byte{0x00}, []byte("aa"), []byte("abcd"), []byte("c"),
		bytes.Repeat([]byte{0xff}, 4), bytes.Repeat([]byte{0xff}, kv.MaxKeySize+10),
		append(bytes.Repeat([]byte("x"), kv.MaxKeySize), 0))
	must(t, view(func(tx kv.Tx) error {
		c := tx.Bucket([]byte("b")).Cursor()
		for _, p := range probes {
			i, _ := slices.BinarySearchFunc(ks, p, bytes.Compare)
			k, v := c.Seek(p)
			if i == len(ks) {
				if k != nil {
					t.Fatalf("Seek(%s) = %s, want past the end", short(p), short(k))
				}
				continue
			}
			if !bytes.Equal(k, ks[i]) || !bytes.Equal(v, []byte{1}) {
				t.Fatalf("Seek(%s) = %s, want %s", short(p), short(k), short(ks[i]))
			}
			if i+1 < len(ks) {
				if k, _ := c.Next(); !bytes.Equal(k, ks[i+1]) {
					t.Fatalf("Next after Seek(%s) = %s, want %s", short(p), short(k), short(ks[i+1]))
				}
			}
		}
		if k, _ := c.Seek(ks[len(ks)-1]); !bytes.Equal(k, ks[len(ks)-1]) {
			t.Fatal("Seek(last) missed it")
		}
		if k, _ := c.Next(); k != nil {
			t.Fatalf("Next after the last key = %s", short(k))
		}
		e := tx.Bucket([]byte("empty")).Cursor()
		if k, _ := e.First(); k != nil {
			t.Fatalf("First of an empty bucket = %q", k)
		}
		if k, _ := e.Seek([]byte("a")); k != nil {
			t.Fatalf("Seek in an empty bucket = %q", k)
		}
		return nil
	}))
}

func testCursorDelete(t *testing.T, view, update Func) {
	const n = 700
	var kvs [][]byte
	for i := range n {
		kvs = append(kvs, fmt.Appendf(nil, "k%04d", i), []byte("v"))
	}
	put(t, update, "b", kvs...)
	// Delete every key whose number is divisible by 3, walking with Next
	// after each Delete.
	must(t, update(func(tx kv.Tx) error {
		c := tx.Bucket([]byte("b")).Cursor()
		i := 0
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if string(k) != fmt.Sprintf("k%04d", i) {
				return fmt.Errorf("cursor on %q, want k%04d", k, i)
			}
			if i%3 == 0 {
				if err := c.Delete(); err != nil {
					return err
				}
			}
			i++
		}
		if i != n {
			return fmt.Errorf("walked %d keys, want %d", i, n)
		}
		return nil
	}))
	// Delete the first key after a Seek, then Next.
	must(t, update(func(tx kv.Tx) error {
		c := tx.Bucket([]byte("b")).Cursor()
		if k, _ := c.Seek([]byte("k0003")); string(k) != "k0004" {
			return fmt.Errorf("Seek(k0003) = %q", k)
		}
		if err := c.Delete(); err != nil {
			return err
		}
		if k, _ := c.Next(); string(k) != "k0005" {
			return fmt.Errorf("Next after Delete = %q, want k0005", k)
		}
		return nil
	}))
	must(t, view(func(tx kv.Tx) error {
		got := keys(t, tx, "b")
		var want []string
		for i := range n {
			if i%3 != 0 && i != 4 {
				want = append(want, fmt.Sprintf("k%04d", i))
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d keys left, want %d", len(got), len(want))
		}
		for i := range want {
			if string(got[i]) != want[i] {
				t.Fatalf("key %d is %q, want %q", i, got[i], want[i])
			}
		}
		return nil
	}))
}

func testForEachStops(t *testing.T, view, update Func) {
	var kvs [][]byte
	for i := range 600 {
		kvs = append(kvs, fmt.Appendf(nil, "k%04d", i), []byte("v"))
	}
	put(t, update, "b", kvs...)
	for _, stopAt := range []int{0, 5, 300, 599} {
		must(t, view(func(tx kv.Tx) error {
			calls := 0
			err := tx.Bucket([]byte("b")).ForEach(func(k, v []byte) error {
				if calls == stopAt {
					return errStop
				}
				calls++
				return nil
			})
			if !errors.Is(err, errStop) {
				t.Fatalf("ForEach stopping at %d returned %v, want the fn's error", stopAt, err)
			}
			if calls != stopAt {
				t.Fatalf("ForEach called fn %d times after stopping at %d", calls, stopAt)
			}
			return nil
		}))
	}
}

func testSequences(t *testing.T, view, update Func) {
	const big = uint64(1)<<63 + 5
	must(t, update(func(tx kv.Tx) error {
		a, err := tx.CreateBucket([]byte("a"))
		if err != nil {
			return err
		}
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		if s := a.Sequence(); s != 0 {
			return fmt.Errorf("new bucket's sequence = %d", s)
		}
		for want := uint64(1); want <= 3; want++ {
			if n, err := a.NextSequence(); err != nil || n != want {
				return fmt.Errorf("NextSequence = %d, %v, want %d", n, err, want)
			}
		}
		if err := b.SetSequence(big); err != nil {
			return err
		}
		if n, err := b.NextSequence(); err != nil || n != big+1 {
			return fmt.Errorf("NextSequence after %d = %d, %v", big, n, err)
		}
		if s := tx.Bucket([]byte("b")).Sequence(); s != big+1 {
			return fmt.Errorf("another handle's Sequence = %d, want %d", s, big+1)
		}
		return nil
	}))
	must(t, view(func(tx kv.Tx) error {
		if s := tx.Bucket([]byte("a")).Sequence(); s != 3 {
			t.Errorf("committed sequence of a = %d, want 3", s)
		}
		if s := tx.Bucket([]byte("b")).Sequence(); s != big+1 {
			t.Errorf("committed sequence of b = %d, want %d", s, big+1)
		}
		return nil
	}))
	must(t, update(func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		if err := b.SetSequence(^uint64(0) - 1); err != nil {
			return err
		}
		if n, err := b.NextSequence(); err != nil || n != ^uint64(0) {
			return fmt.Errorf("NextSequence to the largest uint64 = %d, %v", n, err)
		}
		return nil
	}))
	must(t, view(func(tx kv.Tx) error {
		if s := tx.Bucket([]byte("b")).Sequence(); s != ^uint64(0) {
			t.Errorf("committed sequence = %d, want %d", s, ^uint64(0))
		}
		return nil
	}))
}

func testBuckets(t *testing.T, view, update Func) {
	put(t, update, "a", []byte("k"), []byte("a"))
	put(t, update, "b", []byte("k"), []byte("b"))
	must(t, update(func(tx kv.Tx) error {
		if _, err := tx.CreateBucket([]byte("a")); !errors.Is(err, kv.ErrBucketExists) {
			return fmt.Errorf("CreateBucket of an existing bucket: %v, want ErrBucketExists", err)
		}
		if err := tx.DeleteBucket([]byte("missing")); !errors.Is(err, kv.ErrBucketNotFound) {
			return fmt.Errorf("DeleteBucket of a missing bucket: %v, want ErrBucketNotFound", err)
		}
		if tx.Bucket([]byte("missing")) != nil {
			return errors.New("Bucket of a missing bucket is not nil")
		}
		a, err := tx.CreateBucketIfNotExists([]byte("a"))
		if err != nil {
			return err
		}
		if v := a.Get([]byte("k")); string(v) != "a" {
			return fmt.Errorf("CreateBucketIfNotExists of an existing bucket: Get = %q", v)
		}
		return tx.DeleteBucket([]byte("a"))
	}))
	must(t, view(func(tx kv.Tx) error {
		if tx.Bucket([]byte("a")) != nil {
			t.Error("deleted bucket still there")
		}
		if v := tx.Bucket([]byte("b")).Get([]byte("k")); string(v) != "b" {
			t.Errorf("the other bucket's key = %q", v)
		}
		return nil
	}))
	// A bucket created again under a deleted one's name starts empty.
	must(t, update(func(tx kv.Tx) error {
		a, err := tx.CreateBucket([]byte("a"))
		if err != nil {
			return err
		}
		if k, _ := a.Cursor().First(); k != nil {
			return fmt.Errorf("re-created bucket has key %q", k)
		}
		if a.Sequence() != 0 {
			return fmt.Errorf("re-created bucket has sequence %d", a.Sequence())
		}
		return nil
	}))
	// Deleting and re-creating in one transaction.
	put(t, update, "c", []byte("k"), []byte("c"))
	must(t, update(func(tx kv.Tx) error {
		if err := tx.DeleteBucket([]byte("c")); err != nil {
			return err
		}
		c, err := tx.CreateBucket([]byte("c"))
		if err != nil {
			return err
		}
		if v := c.Get([]byte("k")); v != nil {
			return fmt.Errorf("key of the deleted bucket visible: %q", v)
		}
		return c.Put([]byte("k2"), []byte("c2"))
	}))
	must(t, view(func(tx kv.Tx) error {
		if got := keys(t, tx, "c"); len(got) != 1 || string(got[0]) != "k2" {
			t.Errorf("re-created bucket's keys = %q", got)
		}
		return nil
	}))
}

func testKeyErrors(t *testing.T, view, update Func) {
	must(t, update(func(tx kv.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		if err := b.Put(nil, []byte("v")); !errors.Is(err, kv.ErrKeyRequired) {
			return fmt.Errorf("Put(nil key) = %v, want ErrKeyRequired", err)
		}
		if err := b.Put([]byte{}, []byte("v")); !errors.Is(err, kv.ErrKeyRequired) {
			return fmt.Errorf("Put(empty key) = %v, want ErrKeyRequired", err)
		}
		if err := b.Put(make([]byte, kv.MaxKeySize+1), []byte("v")); !errors.Is(err, kv.ErrKeyTooLarge) {
			return fmt.Errorf("Put(key of MaxKeySize+1) = %v, want ErrKeyTooLarge", err)
		}
		// The errors above spoil nothing: the transaction goes on.
		return b.Put(make([]byte, kv.MaxKeySize), []byte("max"))
	}))
	must(t, view(func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		if v := b.Get(make([]byte, kv.MaxKeySize)); string(v) != "max" {
			t.Errorf("key of MaxKeySize: Get = %q", v)
		}
		if n, _ := kv.Count(b); n != 1 {
			t.Errorf("%d keys, want 1", n)
		}
		return nil
	}))
}

func testReadOnly(t *testing.T, view, update Func) {
	put(t, update, "b", []byte("k"), []byte("v"))
	must(t, update(func(tx kv.Tx) error {
		if !tx.Writable() {
			return errors.New("update's transaction is not writable")
		}
		return nil
	}))
	must(t, view(func(tx kv.Tx) error {
		if tx.Writable() {
			t.Error("view's transaction is writable")
		}
		b := tx.Bucket([]byte("b"))
		for name, err := range map[string]error{
			"Put":         b.Put([]byte("k"), []byte("w")),
			"Delete":      b.Delete([]byte("k")),
			"SetSequence": b.SetSequence(7),
			"CreateBucket": func() error {
				_, err := tx.CreateBucket([]byte("new"))
				return err
			}(),
			"CreateBucketIfNotExists": func() error {
				_, err := tx.CreateBucketIfNotExists([]byte("new"))
				return err
			}(),
			"DeleteBucket": tx.DeleteBucket([]byte("b")),
			"NextSequence": func() error {
				_, err := b.NextSequence()
				return err
			}(),
			"Cursor.Delete": func() error {
				c := b.Cursor()
				c.First()
				return c.Delete()
			}(),
		} {
			if !errors.Is(err, kv.ErrTxNotWritable) {
				t.Errorf("%s in a read transaction: %v, want ErrTxNotWritable", name, err)
			}
		}
		return nil
	}))
	must(t, view(func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		if v := b.Get([]byte("k")); string(v) != "v" || b.Sequence() != 0 || tx.Bucket([]byte("new")) != nil {
			t.Errorf("a read transaction changed the store: %q, %d", v, b.Sequence())
		}
		return nil
	}))
}

func testRollback(t *testing.T, view, update Func) {
	put(t, update, "keep", []byte("a"), []byte("1"), []byte("b"), []byte("2"))
	put(t, update, "doomed", []byte("x"), []byte("y"))
	must(t, update(func(tx kv.Tx) error { return tx.Bucket([]byte("keep")).SetSequence(10) }))
	err := update(func(tx kv.Tx) error {
		keep := tx.Bucket([]byte("keep"))
		steps := []error{
			keep.Put([]byte("a"), []byte("changed")),
			keep.Put([]byte("c"), []byte("new")),
			keep.Delete([]byte("b")),
			keep.SetSequence(99),
			func() error { _, err := keep.NextSequence(); return err }(),
			tx.DeleteBucket([]byte("doomed")),
			func() error {
				nb, err := tx.CreateBucket([]byte("new"))
				if err == nil {
					err = nb.Put([]byte("k"), []byte("v"))
				}
				return err
			}(),
		}
		if err := errors.Join(steps...); err != nil {
			return err
		}
		return errStop
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("update returned %v, want the fn's error", err)
	}
	must(t, view(func(tx kv.Tx) error {
		keep := tx.Bucket([]byte("keep"))
		got := keys(t, tx, "keep")
		if len(got) != 2 || string(got[0]) != "a" || string(got[1]) != "b" {
			t.Errorf("keys after rollback = %q", got)
		}
		if v := keep.Get([]byte("a")); string(v) != "1" {
			t.Errorf("a = %q after rollback", v)
		}
		if s := keep.Sequence(); s != 10 {
			t.Errorf("sequence = %d after rollback", s)
		}
		if tx.Bucket([]byte("doomed")) == nil {
			t.Error("deleted bucket gone after rollback")
		} else if v := tx.Bucket([]byte("doomed")).Get([]byte("x")); string(v) != "y" {
			t.Errorf("deleted bucket's key = %q after rollback", v)
		}
		if tx.Bucket([]byte("new")) != nil {
			t.Error("created bucket there after rollback")
		}
		return nil
	}))
}

func testSnapshot(t *testing.T, view, update Func) {
	put(t, update, "b", []byte("k"), []byte("old"), []byte("gone"), []byte("x"))
	must(t, update(func(tx kv.Tx) error { return tx.Bucket([]byte("b")).SetSequence(1) }))
	must(t, view(func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		if v := b.Get([]byte("k")); string(v) != "old" {
			t.Fatalf("Get = %q before the write", v)
		}
		must(t, update(func(tx kv.Tx) error {
			b := tx.Bucket([]byte("b"))
			nb, err := tx.CreateBucket([]byte("new"))
			return errors.Join(err,
				b.Put([]byte("k"), []byte("new")),
				b.Put([]byte("added"), []byte("x")),
				b.Delete([]byte("gone")),
				b.SetSequence(2),
				func() error {
					if nb == nil {
						return nil
					}
					return nb.Put([]byte("k"), []byte("v"))
				}())
		}))
		if v := b.Get([]byte("k")); string(v) != "old" {
			t.Errorf("the snapshot sees a later write: Get = %q", v)
		}
		if v := b.Get([]byte("gone")); string(v) != "x" {
			t.Errorf("the snapshot sees a later delete: Get = %q", v)
		}
		if got := keys(t, tx, "b"); len(got) != 2 || string(got[0]) != "gone" || string(got[1]) != "k" {
			t.Errorf("the snapshot's keys = %q", got)
		}
		if tx.Bucket([]byte("new")) != nil {
			t.Error("the snapshot sees a later bucket")
		}
		if s := tx.Bucket([]byte("b")).Sequence(); s != 1 {
			t.Errorf("the snapshot's sequence = %d, want 1", s)
		}
		return nil
	}))
	must(t, view(func(tx kv.Tx) error {
		if v := tx.Bucket([]byte("b")).Get([]byte("k")); string(v) != "new" {
			t.Errorf("a later view: Get = %q, want the write", v)
		}
		return nil
	}))
}

func testOwnWrites(t *testing.T, view, update Func) {
	put(t, update, "b", []byte("a"), []byte("1"), []byte("c"), []byte("3"))
	must(t, update(func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		must(t, b.Put([]byte("b"), []byte("2")))
		must(t, b.Put([]byte("a"), []byte("1b")))
		must(t, b.Delete([]byte("c")))
		must(t, b.Delete([]byte("never")))
		if v := b.Get([]byte("b")); string(v) != "2" {
			t.Errorf("own put: Get = %q", v)
		}
		if v := b.Get([]byte("a")); string(v) != "1b" {
			t.Errorf("own overwrite: Get = %q", v)
		}
		if v := b.Get([]byte("c")); v != nil {
			t.Errorf("own delete: Get = %q", v)
		}
		if got := keys(t, tx, "b"); len(got) != 2 || string(got[0]) != "a" || string(got[1]) != "b" {
			t.Errorf("own writes: keys = %q", got)
		}
		nb, err := tx.CreateBucket([]byte("new"))
		must(t, err)
		must(t, nb.Put([]byte("k"), []byte("v")))
		if got := tx.Bucket([]byte("new")); got == nil || string(got.Get([]byte("k"))) != "v" {
			t.Error("own bucket not visible")
		}
		_, err = nb.NextSequence()
		must(t, err)
		if s := tx.Bucket([]byte("new")).Sequence(); s != 1 {
			t.Errorf("own sequence = %d", s)
		}
		return nil
	}))
}

// testKeyBufferReuse checks that Put and Delete do not keep the key's
// buffer: callers build keys in one buffer. (Values need not be copied:
// bbolt keeps them until the transaction ends.)
func testKeyBufferReuse(t *testing.T, view, update Func) {
	must(t, update(func(tx kv.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		key := make([]byte, 0, 16)
		for i := range 5 {
			key = fmt.Appendf(key[:0], "k%d", i)
			if err := b.Put(key, fmt.Appendf(nil, "v%d", i)); err != nil {
				return err
			}
		}
		key = fmt.Appendf(key[:0], "k%d", 2)
		if err := b.Delete(key); err != nil {
			return err
		}
		copy(key, "zz")
		return nil
	}))
	must(t, view(func(tx kv.Tx) error {
		got := keys(t, tx, "b")
		want := []string{"k0", "k1", "k3", "k4"}
		if len(got) != len(want) {
			t.Fatalf("keys = %q, want %q", got, want)
		}
		for i, k := range got {
			if string(k) != want[i] {
				t.Fatalf("keys = %q, want %q", got, want)
			}
		}
		return nil
	}))
}

func testLargeValue(t *testing.T, view, update Func) {
	big := make([]byte, 8<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	put(t, update, "b", []byte("big"), big, []byte("next"), []byte("n"))
	must(t, view(func(tx kv.Tx) error {
		c := tx.Bucket([]byte("b")).Cursor()
		k, v := c.First()
		if string(k) != "big" || !bytes.Equal(v, big) {
			t.Errorf("cursor on the large value: %q, %d bytes", k, len(v))
		}
		if k, _ := c.Next(); string(k) != "next" {
			t.Errorf("Next after the large value = %q", k)
		}
		if v := tx.Bucket([]byte("b")).Get([]byte("big")); !bytes.Equal(v, big) {
			t.Errorf("Get of the large value: %d bytes", len(v))
		}
		return nil
	}))
}

// testGetMany: GetMany answers each key as Get does, in order, repeated
// keys included, across the split into requests (kv.MaxGetMany), for keys
// sharing long prefixes, and sees the transaction's own writes.
func testGetMany(t *testing.T, view, update Func) {
	var kvs [][]byte
	order := orderKeys()
	for i, k := range order {
		kvs = append(kvs, k, []byte(fmt.Sprint("v", i)))
	}
	kvs = append(kvs, []byte("empty"), []byte{})
	for i := range kv.MaxGetMany + 10 {
		kvs = append(kvs, []byte(fmt.Sprintf("n%06d", i)), []byte(fmt.Sprint(i)))
	}
	put(t, update, "b", kvs...)
	var ask [][]byte
	ask = append(ask, order...)
	for i := range kv.MaxGetMany + 20 { // 10 absent at the end
		ask = append(ask, []byte(fmt.Sprintf("n%06d", i)))
	}
	long := append(bytes.Clone(order[len(order)-1]), 'x') // absent, a present key's prefix
	ask = append(ask, []byte("empty"), []byte("absent"), nil, make([]byte, kv.MaxKeySize+1), long, order[0], []byte("n000003"))
	check := func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		got := b.GetMany(ask)
		if len(got) != len(ask) {
			t.Fatalf("GetMany returned %d values for %d keys", len(got), len(ask))
		}
		for i, k := range ask {
			want := b.Get(k)
			if !bytes.Equal(got[i], want) || (got[i] == nil) != (want == nil) {
				t.Errorf("GetMany's value %d of key %q = %#v, Get's %#v", i, short(k), got[i], want)
			}
		}
		return nil
	}
	must(t, view(check))
	must(t, update(check))
	err := update(func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		if err := b.Put([]byte("new"), []byte("w")); err != nil {
			return err
		}
		if err := b.Delete([]byte("n000001")); err != nil {
			return err
		}
		got := b.GetMany([][]byte{[]byte("new"), []byte("n000001"), []byte("n000002")})
		if string(got[0]) != "w" || got[1] != nil || string(got[2]) != "2" {
			t.Errorf("GetMany after a Put and a Delete in the transaction = %q", got)
		}
		return errStop // rolled back
	})
	if !errors.Is(err, errStop) {
		t.Fatal(err)
	}
}
