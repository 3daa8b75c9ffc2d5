package gc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

var (
	testNow = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	day     = 24 * time.Hour
	errBoom = errors.New("boom")
)

func artKey(n int) string { return fmt.Sprintf("%s%064x", chain.ArtifactPrefix, n) }

// callLog records the calls the fakes see, in order, so tests can check
// what Sweep did and when.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf(format, args...))
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// memBlobs is an in-memory Blobs. List returns the infos starting with the
// prefix, in the order given, unless listFn overrides it (to return what a
// misbehaving lister would).
type memBlobs struct {
	log        *callLog
	infos      []cas.Info
	listFn     func(prefix string) []cas.Info
	failDelete map[string]error
	onDelete   func(key string)
	deleted    []string
}

func (b *memBlobs) List(ctx context.Context, prefix string) ([]cas.Info, error) {
	b.log.add("list %s", prefix)
	if b.listFn != nil {
		return b.listFn(prefix), nil
	}
	var out []cas.Info
	for _, in := range b.infos {
		if strings.HasPrefix(in.Key, prefix) {
			out = append(out, in)
		}
	}
	return out, nil
}

func (b *memBlobs) Delete(ctx context.Context, key string) error {
	b.log.add("delete %s", key)
	if err := b.failDelete[key]; err != nil {
		return err
	}
	b.deleted = append(b.deleted, key)
	if b.onDelete != nil {
		b.onDelete(key)
	}
	return nil
}

// groupBlobs adds DeleteKeys to memBlobs: it declines the keys in decline and
// records the size of every group.
type groupBlobs struct {
	*memBlobs
	decline map[string]bool
	groups  []int
	// result, when set, replaces what DeleteKeys returns (to test a deleter
	// that returns unsorted or foreign keys, or an error).
	result func(keys []string) ([]string, error)
}

func (g *groupBlobs) DeleteKeys(ctx context.Context, keys []string) ([]string, error) {
	g.log.add("deleteKeys %d", len(keys))
	g.groups = append(g.groups, len(keys))
	if g.result != nil {
		return g.result(keys)
	}
	var out []string
	for _, k := range keys {
		if !g.decline[k] {
			out = append(out, k)
			g.deleted = append(g.deleted, k)
		}
	}
	return out, nil
}

// memRefs is an in-memory References.
type memRefs struct {
	log  *callLog
	mu   sync.Mutex
	refs []chain.BlobRef
	err  error
}

func (r *memRefs) BlobReferences(ctx context.Context) ([]chain.BlobRef, error) {
	r.log.add("refs")
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.refs), r.err
}

func (r *memRefs) set(refs ...chain.BlobRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs = refs
}

// info is an Info uploaded age before testNow, with Stored = size.
func info(key string, age time.Duration, size int64) cas.Info {
	return cas.Info{Key: key, Size: size, Stored: size, Uploaded: testNow.Add(-age)}
}

// fixture returns fakes sharing a log and an input over them with a one-day
// window and the test clock.
func fixture(infos []cas.Info, refs ...chain.BlobRef) (*memBlobs, *memRefs, SweepInput) {
	log := &callLog{}
	b := &memBlobs{log: log, infos: infos}
	r := &memRefs{log: log, refs: refs}
	return b, r, SweepInput{References: r, Blobs: b, OlderThan: day, Now: func() time.Time { return testNow }}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()

	t.Run("W1", func(t *testing.T) {
		zero := testkit.FileKey(7)
		b, _, in := fixture([]cas.Info{
			info(testkit.FileKey(1), 2*day, 10),               // unreferenced, old: goes
			info(testkit.FileKey(2), 2*day, 20),               // referenced, old: stays
			info(testkit.FileKey(3), time.Hour, 30),           // unreferenced, new: stays
			info(testkit.FileKey(4), day, 40),                 // exactly at the boundary: stays
			info(testkit.FileKey(5), day+time.Nanosecond, 50), // just past it: goes
			info(testkit.FileKey(6), 2*day, 60),               // count 0 is no reference: goes
			{Key: zero, Size: 70, Stored: 70},                 // no upload time: stays
			info(testkit.FileKey(8), -time.Hour, 80),          // uploaded "after now": stays
			info(artKey(1), 3*day, 90),                        // artifact, unreferenced, old: goes
			info(artKey(2), 3*day, 100),                       // artifact, referenced: stays
		},
			chain.BlobRef{Key: artKey(2), References: 1},
			chain.BlobRef{Key: testkit.FileKey(2), References: 3},
			chain.BlobRef{Key: testkit.FileKey(6), References: 0},
		)
		res, err := Sweep(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		want := sbxdb.SweepResult{
			Examined:   10,
			Referenced: 2,
			Deleted:    []string{artKey(1), testkit.FileKey(1), testkit.FileKey(5), testkit.FileKey(6)},
			Bytes:      90 + 10 + 50 + 60,
		}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want.Deleted, b.deleted); diff != "" {
			t.Errorf("deleted from the store (-want +got):\n%s", diff)
		}
	})

	t.Run("W2", func(t *testing.T) {
		junk := "sandbox-files/junk"
		stray := "sandbox-files/listed-only-under-artifacts"
		b, _, in := fixture(nil)
		b.listFn = func(prefix string) []cas.Info {
			switch prefix {
			case "sandbox-files/":
				return []cas.Info{
					info(testkit.FileKey(1), 2*day, 1),
					info(testkit.FileKey(1), 2*day, 1), // listed twice
					info(artKey(1), 2*day, 1),          // wrong prefix: ignored here
					info("other/"+testkit.FileKey(1), 2*day, 1),
					info("sandbox-filesX", 2*day, 1),
					info(junk, 2*day, 1),
				}
			case "sandbox-artifacts/":
				return []cas.Info{
					info(artKey(1), 2*day, 1),
					info(stray, 2*day, 1), // wrong prefix: ignored, stays
					info("tmp/x", 2*day, 1),
					info("", 2*day, 1),
				}
			}
			t.Errorf("List(%q): unexpected prefix", prefix)
			return nil
		}
		res, err := Sweep(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{artKey(1), junk, testkit.FileKey(1)} // "junk" < "sha256/"
		if diff := cmp.Diff(want, res.Deleted); diff != "" {
			t.Errorf("Deleted (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want, b.deleted); diff != "" {
			t.Errorf("deleted from the store, once each (-want +got):\n%s", diff)
		}
		if res.Examined != 3 {
			t.Errorf("Examined = %d, want 3", res.Examined)
		}
		wantCalls := []string{"list sandbox-files/", "list sandbox-artifacts/", "refs",
			"delete " + artKey(1), "delete " + junk, "delete " + testkit.FileKey(1)}
		if diff := cmp.Diff(wantCalls, b.log.get()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})

	t.Run("W3", func(t *testing.T) {
		t.Run("sorted", func(t *testing.T) {
			var infos []cas.Info
			for i := 20; i > 0; i-- {
				infos = append(infos, info(testkit.FileKey(i*7%20), 2*day, 1), info(artKey(i*3%20), 2*day, 1))
			}
			b, _, in := fixture(infos, chain.BlobRef{Key: testkit.FileKey(4), References: 1})
			res, err := Sweep(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range 20 {
				want = append(want, artKey(i))
			}
			for i := range 20 {
				if i != 4 {
					want = append(want, testkit.FileKey(i))
				}
			}
			if diff := cmp.Diff(want, res.Deleted); diff != "" {
				t.Errorf("Deleted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, b.deleted); diff != "" {
				t.Errorf("deleted from the store (-want +got):\n%s", diff)
			}
			if !slices.IsSorted(res.Deleted) {
				t.Errorf("Deleted not sorted: %q", res.Deleted)
			}
		})
		t.Run("failing delete", func(t *testing.T) {
			b, _, in := fixture([]cas.Info{
				info(testkit.FileKey(1), 2*day, 1), info(testkit.FileKey(2), 2*day, 2),
				info(testkit.FileKey(3), 2*day, 4), info(testkit.FileKey(4), 2*day, 8),
			})
			b.failDelete = map[string]error{testkit.FileKey(3): errBoom}
			res, err := Sweep(ctx, in)
			if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), testkit.FileKey(3)) {
				t.Fatalf("err = %v, want boom naming %s", err, testkit.FileKey(3))
			}
			want := sbxdb.SweepResult{Examined: 4, Deleted: []string{testkit.FileKey(1), testkit.FileKey(2)}, Bytes: 3}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if slices.Contains(b.log.get(), "delete "+testkit.FileKey(4)) {
				t.Errorf("a key after the failing one was deleted")
			}
		})
	})

	t.Run("W4", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			edit func(*SweepInput)
		}{
			{"negative", func(in *SweepInput) { in.OlderThan = -time.Nanosecond }},
			{"negative immediate", func(in *SweepInput) { in.OlderThan, in.Immediate = -day, true }},
			{"missing", func(in *SweepInput) { in.OlderThan = 0 }},
			{"nil references", func(in *SweepInput) { in.References = nil }},
			{"nil blobs", func(in *SweepInput) { in.Blobs = nil }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b, _, in := fixture([]cas.Info{info(testkit.FileKey(1), 2*day, 1)})
				tc.edit(&in)
				res, err := Sweep(ctx, in)
				if !errors.Is(err, ErrInvalidOptions) {
					t.Fatalf("err = %v, want ErrInvalidOptions", err)
				}
				if calls := b.log.get(); len(calls) != 0 {
					t.Errorf("calls before rejecting the options: %q", calls)
				}
				if diff := cmp.Diff(sbxdb.SweepResult{}, res); diff != "" {
					t.Errorf("result (-want +got):\n%s", diff)
				}
			})
		}
	})
}

func TestSweepReadsReferencesAfterListing(t *testing.T) {
	// A checkpoint committed while the blobs are listed must protect its
	// keys: the marks are read after the listing.
	b, r, in := fixture([]cas.Info{info(testkit.FileKey(1), 2*day, 1), info(testkit.FileKey(2), 2*day, 1)})
	inner := b.infos
	b.listFn = func(prefix string) []cas.Info {
		if prefix == "sandbox-artifacts/" {
			r.set(chain.BlobRef{Key: testkit.FileKey(2), References: 1})
		}
		var out []cas.Info
		for _, in := range inner {
			if strings.HasPrefix(in.Key, prefix) {
				out = append(out, in)
			}
		}
		return out
	}
	res, err := Sweep(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{testkit.FileKey(1)}, res.Deleted); diff != "" {
		t.Errorf("Deleted (-want +got):\n%s", diff)
	}
	want := []string{"list sandbox-files/", "list sandbox-artifacts/", "refs", "delete " + testkit.FileKey(1)}
	if diff := cmp.Diff(want, b.log.get()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestSweepImmediate(t *testing.T) {
	b, _, in := fixture([]cas.Info{info(testkit.FileKey(1), time.Nanosecond, 1), info(testkit.FileKey(2), 0, 1)})
	in.OlderThan, in.Immediate = 0, true
	res, err := Sweep(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	// Strictly before now: a key uploaded at now stays.
	if diff := cmp.Diff([]string{testkit.FileKey(1)}, res.Deleted); diff != "" {
		t.Errorf("Deleted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{testkit.FileKey(1)}, b.deleted); diff != "" {
		t.Errorf("deleted from the store (-want +got):\n%s", diff)
	}
}

func TestSweepDefaultClock(t *testing.T) {
	b, _, in := fixture(nil)
	b.infos = []cas.Info{
		{Key: testkit.FileKey(1), Uploaded: time.Now().Add(-2 * time.Hour)},
		{Key: testkit.FileKey(2), Uploaded: time.Now()},
	}
	in.Now, in.OlderThan = nil, time.Hour
	res, err := Sweep(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{testkit.FileKey(1)}, res.Deleted); diff != "" {
		t.Errorf("Deleted (-want +got):\n%s", diff)
	}
}

func TestSweepNothingToDelete(t *testing.T) {
	_, _, in := fixture(nil)
	res, err := Sweep(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	// An empty list, not nil: a JSON report shows [] as the customer's array.
	if res.Deleted == nil || len(res.Deleted) != 0 {
		t.Errorf("Deleted = %#v, want an empty non-nil slice", res.Deleted)
	}
}

func TestSweepKeysDeleter(t *testing.T) {
	const n = 2*DeleteGroup + 452
	var infos []cas.Info
	for i := range n {
		infos = append(infos, info(testkit.FileKey(i), 2*day, int64(i)))
	}
	b, _, in := fixture(infos, chain.BlobRef{Key: testkit.FileKey(0), References: 1})
	g := &groupBlobs{memBlobs: b, decline: map[string]bool{testkit.FileKey(5): true, testkit.FileKey(DeleteGroup + 3): true}}
	in.Blobs = g
	res, err := Sweep(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	var bytes int64
	for i := 1; i < n; i++ {
		if k := testkit.FileKey(i); !g.decline[k] {
			want = append(want, k)
			bytes += int64(i)
		}
	}
	if diff := cmp.Diff(want, res.Deleted); diff != "" {
		t.Errorf("Deleted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, b.deleted); diff != "" {
		t.Errorf("deleted from the store (-want +got):\n%s", diff)
	}
	if res.Bytes != bytes {
		t.Errorf("Bytes = %d, want %d (declined keys not counted)", res.Bytes, bytes)
	}
	if diff := cmp.Diff([]int{DeleteGroup, DeleteGroup, n - 1 - 2*DeleteGroup}, g.groups); diff != "" {
		t.Errorf("group sizes (-want +got):\n%s", diff)
	}
	for _, c := range b.log.get() {
		if strings.HasPrefix(c, "delete ") {
			t.Fatalf("Delete called although DeleteKeys exists: %s", c)
		}
	}
}

func TestSweepKeysDeleterResult(t *testing.T) {
	infos := []cas.Info{info(testkit.FileKey(1), 2*day, 1), info(testkit.FileKey(2), 2*day, 2), info(testkit.FileKey(3), 2*day, 4)}

	t.Run("unsorted, foreign and repeated keys", func(t *testing.T) {
		b, _, in := fixture(infos)
		in.Blobs = &groupBlobs{memBlobs: b, result: func(keys []string) ([]string, error) {
			return []string{testkit.FileKey(3), "sandbox-files/not-asked", testkit.FileKey(1), testkit.FileKey(3)}, nil
		}}
		res, err := Sweep(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		want := sbxdb.SweepResult{Examined: 3, Deleted: []string{testkit.FileKey(1), testkit.FileKey(3)}, Bytes: 5}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
	})

	t.Run("error", func(t *testing.T) {
		var many []cas.Info
		for i := range DeleteGroup + 1 {
			many = append(many, info(testkit.FileKey(i), 2*day, 1))
		}
		b, _, in := fixture(many)
		g := &groupBlobs{memBlobs: b, result: func(keys []string) ([]string, error) {
			return keys[:2], errBoom
		}}
		in.Blobs = g
		res, err := Sweep(context.Background(), in)
		if !errors.Is(err, errBoom) {
			t.Fatalf("err = %v, want boom", err)
		}
		// What the deleter reports deleted is reported with its error; the
		// next group is never sent.
		want := sbxdb.SweepResult{Examined: DeleteGroup + 1, Deleted: []string{testkit.FileKey(0), testkit.FileKey(1)}, Bytes: 2}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int{DeleteGroup}, g.groups); diff != "" {
			t.Errorf("group sizes (-want +got):\n%s", diff)
		}
	})
}

// TestPlanSweep: a plan names what Sweep would delete, with the sizes, and
// lists and reads the references without deleting anything.
func TestPlanSweep(t *testing.T) {
	infos := []cas.Info{info(testkit.FileKey(1), 2*day, 3), info(testkit.FileKey(2), 2*day, 5), info(artKey(1), 2*day, 7)}
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprint("grouped=", grouped), func(t *testing.T) {
			b, _, in := fixture(infos, chain.BlobRef{Key: testkit.FileKey(2), References: 1})
			if grouped {
				in.Blobs = &groupBlobs{memBlobs: b}
			}
			p, err := PlanSweep(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			want := &SweepPlan{Examined: 3, Referenced: 1, Keys: []string{artKey(1), testkit.FileKey(1)}, Stored: []int64{7, 3}}
			if diff := cmp.Diff(want, p); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			wantRes := sbxdb.SweepResult{Examined: 3, Referenced: 1, Deleted: []string{artKey(1), testkit.FileKey(1)}, Bytes: 10}
			if diff := cmp.Diff(wantRes, p.Result()); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
			wantCalls := []string{"list sandbox-files/", "list sandbox-artifacts/", "refs"}
			if diff := cmp.Diff(wantCalls, b.log.get()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExecuteSweep: a plan executed with nothing changed deletes exactly
// its keys; a plan made stale by a reference to one of its keys keeps that
// key (read again without a KeysDeleter; left to the deleter's re-check
// with one, which sees only the plan's keys); a key not in the plan is
// never deleted, however unreferenced.
func TestExecuteSweep(t *testing.T) {
	ctx := context.Background()
	infos := []cas.Info{info(testkit.FileKey(1), 2*day, 3), info(testkit.FileKey(2), 2*day, 5), info(artKey(1), 2*day, 7)}
	t.Run("unchanged", func(t *testing.T) {
		b, _, in := fixture(infos)
		p, err := PlanSweep(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		res, err := ExecuteSweep(ctx, in, p)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(p.Result(), res); diff != "" {
			t.Errorf("executed (-planned +got):\n%s", diff)
		}
		if diff := cmp.Diff(p.Keys, b.deleted); diff != "" {
			t.Errorf("deleted (-planned +got):\n%s", diff)
		}
	})
	t.Run("referenced since", func(t *testing.T) {
		b, r, in := fixture(infos)
		p, err := PlanSweep(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		// A checkpoint committed after the plan names a planned key, and a
		// blob uploaded after it is as old and unreferenced, but unplanned.
		r.set(chain.BlobRef{Key: testkit.FileKey(1), References: 1})
		b.infos = append(b.infos, info(testkit.FileKey(3), 2*day, 11))
		res, err := ExecuteSweep(ctx, in, p)
		if err != nil {
			t.Fatal(err)
		}
		want := sbxdb.SweepResult{Examined: 3, Deleted: []string{artKey(1), testkit.FileKey(2)}, Bytes: 12}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want.Deleted, b.deleted); diff != "" {
			t.Errorf("deleted (-want +got):\n%s", diff)
		}
	})
	t.Run("deleter declines", func(t *testing.T) {
		b, _, in := fixture(infos)
		g := &groupBlobs{memBlobs: b, decline: map[string]bool{testkit.FileKey(1): true}}
		in.Blobs = g
		p, err := PlanSweep(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		res, err := ExecuteSweep(ctx, in, p)
		if err != nil {
			t.Fatal(err)
		}
		want := sbxdb.SweepResult{Examined: 3, Deleted: []string{artKey(1), testkit.FileKey(2)}, Bytes: 12}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
		// The deleter decides: the references are not read a second time.
		wantCalls := []string{"list sandbox-files/", "list sandbox-artifacts/", "refs", "deleteKeys 3"}
		if diff := cmp.Diff(wantCalls, b.log.get()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		_, _, in := fixture(infos)
		for _, p := range []*SweepPlan{nil, {Keys: []string{testkit.FileKey(1)}}} {
			if _, err := ExecuteSweep(ctx, in, p); !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("ExecuteSweep(%+v) = %v; want ErrInvalidOptions", p, err)
			}
		}
	})
}

func TestSweepUnsortedInput(t *testing.T) {
	var infos []cas.Info
	var refs []chain.BlobRef
	var want []string
	for i := range 200 {
		infos = append(infos, info(testkit.FileKey(i), 2*day, 1), info(artKey(i), 2*day, 1))
		if i%3 == 0 {
			refs = append(refs, chain.BlobRef{Key: testkit.FileKey(i), References: 1}, chain.BlobRef{Key: artKey(i), References: 2})
		}
	}
	for i := range 200 {
		if i%3 != 0 {
			want = append(want, artKey(i))
		}
	}
	for i := range 200 {
		if i%3 != 0 {
			want = append(want, testkit.FileKey(i))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(infos), func(i, j int) { infos[i], infos[j] = infos[j], infos[i] })
	rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
	// The lister's own slice, returned as is, must not be sorted in place.
	b, _, in := fixture(nil, refs...)
	b.listFn = func(prefix string) []cas.Info { return infos }
	before := slices.Clone(infos)

	res, err := Sweep(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, res.Deleted); diff != "" {
		t.Errorf("Deleted (-want +got):\n%s", diff)
	}
	if res.Examined != 400 || res.Referenced != 134 {
		t.Errorf("Examined, Referenced = %d, %d, want 400, 134", res.Examined, res.Referenced)
	}
	if diff := cmp.Diff(before, infos); diff != "" {
		t.Errorf("the lister's slice was modified (-before +after):\n%s", diff)
	}
}

func TestSweepDuplicateListingFailsClosed(t *testing.T) {
	// A key listed twice is as new as its newest listing, and kept if any
	// listing has no upload time.
	b, _, in := fixture(nil)
	b.listFn = func(prefix string) []cas.Info {
		if prefix != "sandbox-files/" {
			return nil
		}
		return []cas.Info{
			info(testkit.FileKey(1), 2*day, 1), info(testkit.FileKey(1), time.Hour, 1),
			info(testkit.FileKey(2), 2*day, 1), {Key: testkit.FileKey(2)},
			info(testkit.FileKey(3), 2*day, 1), info(testkit.FileKey(3), 3*day, 1),
		}
	}
	res, err := Sweep(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{testkit.FileKey(3)}, res.Deleted); diff != "" {
		t.Errorf("Deleted (-want +got):\n%s", diff)
	}
}

func TestSweepErrors(t *testing.T) {
	t.Run("cancelled before", func(t *testing.T) {
		b, _, in := fixture([]cas.Info{info(testkit.FileKey(1), 2*day, 1)})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Sweep(ctx, in); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if len(b.deleted) != 0 {
			t.Errorf("deleted %q", b.deleted)
		}
	})
	t.Run("cancelled while deleting", func(t *testing.T) {
		b, _, in := fixture([]cas.Info{info(testkit.FileKey(1), 2*day, 1), info(testkit.FileKey(2), 2*day, 1)})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b.onDelete = func(string) { cancel() }
		res, err := Sweep(ctx, in)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if diff := cmp.Diff([]string{testkit.FileKey(1)}, res.Deleted); diff != "" {
			t.Errorf("Deleted (-want +got):\n%s", diff)
		}
	})
	t.Run("cancelled between groups", func(t *testing.T) {
		var infos []cas.Info
		for i := range DeleteGroup + 1 {
			infos = append(infos, info(testkit.FileKey(i), 2*day, 1))
		}
		b, _, in := fixture(infos)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g := &groupBlobs{memBlobs: b}
		g.result = func(keys []string) ([]string, error) { cancel(); return keys, nil }
		in.Blobs = g
		res, err := Sweep(ctx, in)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if len(res.Deleted) != DeleteGroup || len(g.groups) != 1 {
			t.Errorf("deleted %d keys in %d groups, want %d in 1", len(res.Deleted), len(g.groups), DeleteGroup)
		}
	})
	t.Run("references", func(t *testing.T) {
		b, r, in := fixture([]cas.Info{info(testkit.FileKey(1), 2*day, 1)})
		r.err = errBoom
		if _, err := Sweep(context.Background(), in); !errors.Is(err, errBoom) {
			t.Fatalf("err = %v, want boom", err)
		}
		if len(b.deleted) != 0 {
			t.Errorf("deleted %q without marks", b.deleted)
		}
	})
	t.Run("list", func(t *testing.T) {
		_, r, in := fixture(nil)
		in.Blobs = failingList{}
		if _, err := Sweep(context.Background(), in); !errors.Is(err, errBoom) {
			t.Fatalf("err = %v, want boom", err)
		}
		if r.log.get() != nil {
			t.Errorf("references read after a failed listing: %q", r.log.get())
		}
	})
}

type failingList struct{}

func (failingList) List(context.Context, string) ([]cas.Info, error) { return nil, errBoom }
func (failingList) Delete(context.Context, string) error             { return errBoom }

// benchBlobs serves a prebuilt listing and deletes nothing, so the benchmark
// measures Sweep, not the fake.
type benchBlobs struct{ files, artifacts []cas.Info }

func (b *benchBlobs) List(_ context.Context, prefix string) ([]cas.Info, error) {
	if prefix == "sandbox-files/" {
		return b.files, nil
	}
	return b.artifacts, nil
}

func (b *benchBlobs) Delete(context.Context, string) error { return nil }

type benchGroups struct{ *benchBlobs }

func (benchGroups) DeleteKeys(_ context.Context, keys []string) ([]string, error) { return keys, nil }

type benchRefs []chain.BlobRef

func (r benchRefs) BlobReferences(context.Context) ([]chain.BlobRef, error) { return r, nil }

// BenchmarkSweep sweeps 1,000,000 keys, 90% of them referenced.
func BenchmarkSweep(b *testing.B) {
	const n = 1_000_000
	blobs := &benchBlobs{}
	var refs benchRefs
	old := testNow.Add(-2 * day)
	// Artifacts sort before files; both lists and the references are in
	// byte order, as the stores return them.
	for i := range n {
		key := testkit.FileKey(i)
		if i < n/5 {
			key = artKey(i)
		}
		in := cas.Info{Key: key, Size: 4096, Stored: 1024, Uploaded: old}
		if i < n/5 {
			blobs.artifacts = append(blobs.artifacts, in)
		} else {
			blobs.files = append(blobs.files, in)
		}
		if i%10 != 0 {
			refs = append(refs, chain.BlobRef{Key: key, References: 1})
		}
	}
	for _, bc := range []struct {
		name  string
		blobs Blobs
		plan  bool
	}{
		{"Delete", blobs, false},
		{"DeleteKeys", benchGroups{blobs}, false},
		{"Plan", blobs, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := SweepInput{References: refs, Blobs: bc.blobs, OlderThan: day, Now: func() time.Time { return testNow }}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				sweep := Sweep
				if bc.plan {
					sweep = func(ctx context.Context, in SweepInput) (sbxdb.SweepResult, error) {
						p, err := PlanSweep(ctx, in)
						if err != nil {
							return sbxdb.SweepResult{}, err
						}
						return p.Result(), nil
					}
				}
				res, err := sweep(context.Background(), in)
				if err != nil || res.Examined != n || len(res.Deleted) != n/10 {
					b.Fatalf("Sweep: %d examined, %d deleted, %v", res.Examined, len(res.Deleted), err)
				}
			}
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(n)*float64(b.N)/s, "keys/s")
			b.ReportMetric(float64(len(refs))*float64(b.N)/s, "refs/s")
		})
	}
}
