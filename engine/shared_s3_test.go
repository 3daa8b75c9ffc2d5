package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/bench/workload"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/internal/objstore/s3"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
	"github.com/sbxdb/sbxdb/storetest"
)

// s3Subjects returns a factory of stores whose metadata is in a fresh
// PostgreSQL database and whose blobs are in a fresh bucket of one S3
// server (versitygw) started for the test.
func s3Subjects(t *testing.T) storetest.Factory {
	srv := s3test.Start(t)
	s3test.Env(t, srv)
	return func(t *testing.T, contract sbxdb.Options) *storetest.Subject {
		opts := engineOptions(contract)
		opts.Blobs = "s3://" + s3test.Bucket() + "/blobs"
		return sharedSubjectWith(t, opts)
	}
}

func TestSharedS3Conformance(t *testing.T) { storetest.RunConformance(t, s3Subjects(t)) }
func TestSharedS3ForkConformance(t *testing.T) {
	storetest.RunForkConformance(t, s3Subjects(t))
}

// Blobs in a bucket need shared metadata, and a URL that is not an S3 one
// is refused, both before anything is created.
func TestSharedS3Options(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	for _, o := range []engine.Options{
		{Blobs: "s3://bucket/prefix"}, // metadata in sbx.db
		{Blobs: "s3://bucket/prefix", Metadata: "mysql://x"},
		{Blobs: "http://bucket/prefix", Metadata: "postgres://u@127.0.0.1:1/db"},
		{Blobs: "s3://Bad_Bucket", Metadata: "postgres://u@127.0.0.1:1/db"},
	} {
		if _, err := engine.Open(dir, &o); !errors.Is(err, sbxdb.ErrInvalidOptions) {
			t.Errorf("Open with Blobs %q, Metadata %q: %v, want ErrInvalidOptions", o.Blobs, o.Metadata, err)
		}
	}
	if _, err := engine.CheckOptions(&engine.Options{Blobs: "s3://bucket/p", Metadata: "postgres://u@h/db"}); err != nil {
		t.Errorf("CheckOptions of a valid pair: %v", err)
	}
}

// Two servers (two engine.DBs on their own directories) share one
// PostgreSQL database and one bucket: a tree one captures, the other
// restores byte for byte, with nothing in its own blob directory.
func TestSharedS3CaptureRestore(t *testing.T) {
	srv := s3test.Start(t)
	s3test.Env(t, srv)
	ctx := context.Background()
	opts := engine.Options{NoSync: true, Metadata: pgtest.URL(t), Blobs: "s3://" + s3test.Bucket() + "/blobs"}
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	spec := workload.Quick()
	spec.TextFiles, spec.NodeModules.Files = 500, 100 // node_modules is left out by the default policy
	_, err := workload.Generate(ws, spec)
	if err != nil {
		t.Fatal(err)
	}
	age(t, ws)

	one, err := engine.Open(filepath.Join(root, "one"), &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	two, err := engine.Open(filepath.Join(root, "two"), &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()

	w, err := one.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := one.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	bucket := openTestBucket(t, opts.Blobs)
	var objects, bytes int64
	bucket.List(ctx, "", func(i objstore.Info) error { objects++; bytes += i.Size; return nil })
	// Each object is one PUT (all are below the multipart size here).
	files := res.Stats.Files
	t.Logf("capture of %d files: %d objects, %d bytes in the bucket: %.4f PUTs per file",
		files, objects, bytes, float64(objects)/float64(files))
	// The handle's own client counts what it sent: at least one upload
	// per object; a store without a bucket has no counts.
	if rq, ok := one.BlobRequests(); !ok || rq.Puts+rq.Parts < objects || rq.Total() < rq.Puts {
		t.Errorf("BlobRequests after the capture = %+v, %v; want ok and at least %d uploads", rq, ok, objects)
	}
	if local, err := engine.Open(filepath.Join(root, "local"), &engine.Options{NoSync: true}); err != nil {
		t.Fatal(err)
	} else {
		if _, ok := local.BlobRequests(); ok {
			t.Error("BlobRequests of a store without a bucket says ok")
		}
		local.Close()
	}

	out := filepath.Join(root, "restored")
	if _, err := two.Restore(ctx, res.Checkpoint.ID, out, nil); err != nil {
		t.Fatalf("restore on the second server: %v", err)
	}
	want, err := fstree.Read(ws, "node_modules")
	if err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, out)
	if diff := fstree.Diff(want, got); len(diff) != 0 {
		t.Fatalf("restored tree differs in %d places, first %v", len(diff), diff[0])
	}
	if !cmp.Equal(want, got) || len(want) < 500 {
		t.Fatalf("restored tree differs, or the tree is smaller than meant: %d entries", len(want))
	}
	// Checks on either server find nothing wrong; a repack finds nothing to do.
	for _, db := range []*engine.DB{one, two} {
		rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
		if err != nil || !rep.Clean() {
			t.Fatalf("Check: %+v, %v", rep, err)
		}
	}
	if st, err := two.Repack(ctx, cas.RepackOptions{}); err != nil || st.Packs != 0 {
		t.Errorf("Repack with nothing dead = %+v, %v; want nothing done", st, err)
	}
	// gc on the second server, once the first made an empty checkpoint
	// the head and deleted the other: the sweep deletes every blob.
	if _, err := one.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.DeleteCheckpoints(ctx, "t1", 1, w.Writer); err != nil {
		t.Fatal(err)
	}
	gcRes, err := two.GC(ctx, sbxdb.GCOptions{Immediate: true})
	if err != nil {
		t.Fatalf("GC with blobs in object storage: %v", err)
	}
	if len(gcRes.Sweep.Deleted) == 0 || gcRes.After.Blobs != 0 {
		t.Fatalf("GC swept %d blobs, %d left; want every blob swept", len(gcRes.Sweep.Deleted), gcRes.After.Blobs)
	}
	// A server started without the bucket would index blobs no other
	// server can read: refused.
	noBlobs := opts
	noBlobs.Blobs = ""
	if db, err := engine.Open(filepath.Join(root, "three"), &noBlobs); !errors.Is(err, engine.ErrBlobsElsewhere) {
		if err == nil {
			db.Close()
		}
		t.Errorf("Open without Blobs of a store whose blobs are in a bucket = %v; want ErrBlobsElsewhere", err)
	}
	// Nor may a server name another bucket or prefix.
	other := opts
	other.Blobs += "-other"
	if db, err := engine.Open(filepath.Join(root, "four"), &other); !errors.Is(err, engine.ErrBlobsElsewhere) {
		if err == nil {
			db.Close()
		}
		t.Errorf("Open with another prefix = %v; want ErrBlobsElsewhere", err)
	}
}

// openTestBucket opens its own client of the bucket at url (the AWS_*
// variables set), to look at what the servers stored.
func openTestBucket(t *testing.T, url string) *s3.Store {
	t.Helper()
	cfg, err := s3.ConfigFromEnv(url)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
