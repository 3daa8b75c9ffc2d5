// Package capture records a workspace directory as a checkpoint: it walks
// the tree under the policy (workspace), takes unchanged files from the
// stat cache, reads, redacts and stores the others in one blob batch
// (cas), and appends the checkpoint in the transaction that indexes the
// batch. It reaches the store only through the Store interface the engine
// hands it: the blob store, the writer check, the head and the append's
// transaction body, the clock and the test hooks. Files: capture.go (the
// run and the reading of files), walk.go (the tree), statcache.go (the
// stat cache), stat_*.go (stat by descriptor), parallel.go (the readers).
package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/progress"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/workspace"
)

// changeLog collects what changed or vanished while a capture ran, and
// what was skipped as unsupported; a strict log makes the first change an
// error instead.
type changeLog struct {
	strict   bool
	mu       sync.Mutex
	warnings []sbxdb.CaptureWarning
}

func (l *changeLog) report(path string, what sbxdb.EntryChange, detail string) error {
	w := sbxdb.CaptureWarning{Path: path, What: what, Detail: detail}
	if l.strict {
		return &sbxdb.WorkspaceChangedError{Warning: w}
	}
	l.add(w)
	return nil
}

// skip records an entry left out as unsupported; strict or not.
func (l *changeLog) skip(path, detail string) {
	l.add(sbxdb.CaptureWarning{Path: path, What: sbxdb.EntrySkipped, Detail: detail})
}

func (l *changeLog) add(w sbxdb.CaptureWarning) {
	l.mu.Lock()
	l.warnings = append(l.warnings, w)
	l.mu.Unlock()
}

// smallFile is the size up to which a file is read whole into memory and
// packed; larger files are streamed into a blob file of their own.
const smallFile = 1 << 20

// Store is what a capture needs of the store it records into; the engine
// implements it over its DB, which must be writable.
type Store interface {
	// Dir is the store's directory: never captured, and home of the stat
	// caches (StatCacheDir).
	Dir() string
	// Names are the names the store keeps in its directory.
	Names() *StoreNames
	// Blobs is the blob store the files' bytes go to, in one batch.
	Blobs() *cas.Store
	// CheckWriter fails unless w holds the live lease of its thread.
	CheckWriter(w lease.Writer) error
	// Head returns the thread's head checkpoint id, "" for none.
	Head(ctx context.Context, threadID string) (string, error)
	// AppendTx checks in (outside any transaction) and returns the body
	// that appends its checkpoint inside one: the batch's commit runs it
	// in the transaction that indexes the batch's blobs.
	AppendTx(in *chain.AppendInput) (func(kv.Tx) error, error)
	// NowMs reads the store's clock, in epoch milliseconds.
	NowMs() int64
	// Point runs the test hook registered under name, if any.
	Point(name string) error
}

// Capture records the workspace in.Dir as a new checkpoint on the head of
// in.Writer.ThreadID. It walks the tree under the policy, takes unchanged
// files from the stat cache, hashes and compresses the others in parallel,
// makes every new blob durable with one barrier, and then appends the
// checkpoint and indexes its new blobs in one transaction: blob bytes are
// durable before the checkpoint that names them commits, and any error
// leaves the store as it was. The store's
// own directory is never captured, even when it lies inside in.Dir; when
// it is in.Dir, the store's own entries are left out.
func Capture(ctx context.Context, st Store, in sbxdb.CaptureInput) (*sbxdb.CaptureResult, error) {
	// A blob a capture found stored can be swept by another process
	// sharing the metadata before the capture commits (commitCapture
	// re-checks): the capture then runs again, and stores it anew.
	for attempt := 1; ; attempt++ {
		res, err := capture1(ctx, st, in)
		if !errors.Is(err, errBlobSwept) || attempt == captureAttempts {
			return res, err
		}
	}
}

// captureAttempts bounds the runs of a capture whose found blobs were swept
// meanwhile: each run stores what the previous one lost.
const captureAttempts = 3

// errBlobSwept is commitCapture's error when a blob the checkpoint names
// was deleted after the capture found it stored.
var errBlobSwept = errors.New("a blob the capture found stored was deleted by a sweep meanwhile; capture again")

// capture1 is one run of Capture.
func capture1(ctx context.Context, st Store, in sbxdb.CaptureInput) (*sbxdb.CaptureResult, error) {
	if err := chain.CheckID("threadId", in.Writer.ThreadID); err != nil {
		return nil, err
	}
	root, err := filepath.Abs(in.Dir)
	if err != nil {
		return nil, chain.Errorf(chain.ErrInvalidWorkspace, "workspace %q: %v", in.Dir, err)
	}
	rootDir, err := openWorkspace(root)
	if err != nil {
		return nil, err
	}
	defer rootDir.Close()
	// Fail early, before reading gigabytes, if the lease is not ours; the
	// append checks it again.
	if err := st.CheckWriter(in.Writer); err != nil {
		return nil, err
	}
	redactor := workspace.NewRedactor(in.Secrets)
	cachePath := StatCachePath(st.Dir(), in.Writer.ThreadID, root)

	// Before the batch's first lookup (cas/deletions.go). An unreadable
	// count makes the commit look up every blob it names.
	deletions, err := st.Blobs().Deletions()
	if err != nil {
		deletions = unknownDeletions
	}
	c := &capture{point: st.Point, root: root, dir: rootDir, redactor: redactor, batch: st.Blobs().NewBatch(),
		changes: &changeLog{strict: in.FailOnChange}, skipUnsupported: in.SkipUnsupported}
	defer c.batch.Close() // after the append: the batch pins its keys until then
	// A cached digest is only good while its blob is stored; pinned, it
	// stays stored until the append has committed. The cache is loaded,
	// and every key it holds pinned and looked up, while the tree is
	// walked: the walk waits on system calls, and pinning the keys of files
	// deleted since only keeps their blobs until this capture ends.
	type pinned struct {
		cache          *statCache
		missing, stale []string
		err            error
	}
	pins := make(chan pinned, 1)
	go func() {
		cache := &statCache{}
		if !in.Rehash {
			cache = loadStatCache(cachePath, redactor.Fingerprint())
		}
		missing, stale, err := c.batch.Lookup(ctx, cache.keys())
		pins <- pinned{cache, missing, stale, err}
	}()
	started := time.Now()
	storeDir, _ := filepath.Abs(st.Dir())
	tree, excluded, err := walkTree(ctx, &walkInput{root: root, dir: rootDir, skip: storeDir, names: st.Names(), pol: &in.Policy,
		allowEscape: in.AllowEscapingSymlinks, skipUnsupported: in.SkipUnsupported, changes: c.changes, point: st.Point})
	pin := <-pins
	if err == nil {
		err = pin.err
	}
	if err != nil {
		return nil, err
	}
	cache := pin.cache
	files := c.plan(tree, cache, pin.missing, pin.stale)
	if err := c.pinArtifacts(ctx, in.Artifacts); err != nil {
		return nil, err
	}
	if err := st.Point("capture.walked"); err != nil {
		return nil, err
	}
	stop := progress.Report(in.Progress, &c.progress)
	err = parallel(ctx, files, c.newHasher)
	if err == nil {
		// The last files' blobs are looked up (the others' were, a few
		// thousand at a time) and pinned before the checkpoint is built.
		err = c.batch.Settle(ctx)
	}
	stop()
	if err != nil {
		return nil, err
	}
	if c.dropped.Load() {
		tree = dropVanished(tree)
	}
	c.count(tree, excluded)
	if in.RequireFiles && c.stats.Files+c.stats.Symlinks == 0 {
		return nil, emptyCapture(&in.Policy, root, c.stats.Excluded)
	}
	if err := st.Point("capture.beforeCommit"); err != nil {
		return nil, err
	}
	// The new stat cache is encoded and written beside the old one while
	// the append waits on the disk, and renamed over it only once the
	// append has committed.
	var cacheTemp chan string
	if c.stats.FilesRead > 0 || c.stats.Files != len(cache.entries) {
		cacheTemp = make(chan string, 1)
		go func() {
			cacheTemp <- writeStatCacheTemp(cachePath, encodeStatCache(started.UnixNano(), redactor.Fingerprint(), tree))
		}()
	}
	cp, err := commitCapture(ctx, st, c.batch, &in, manifest(tree), deletions)
	if cacheTemp != nil {
		if tmp := <-cacheTemp; tmp != "" && err == nil {
			os.Rename(tmp, cachePath)
		} else if tmp != "" {
			os.Remove(tmp)
		}
	}
	if err != nil {
		return nil, err
	}
	c.stats.BytesNew = c.batch.Written()
	// Every blob the batch stored is a file's, the first read of its
	// bytes; every other file read found its blob stored, or stored by
	// another file of the capture.
	c.stats.BlobsNew = c.batch.NewBlobs()
	c.stats.Deduplicated = c.stats.FilesRead - c.stats.BlobsNew
	warnings := c.changes.warnings
	slices.SortStableFunc(warnings, func(a, b sbxdb.CaptureWarning) int { return strings.Compare(a.Path, b.Path) })
	return &sbxdb.CaptureResult{Checkpoint: cp, Stats: c.stats, Warnings: warnings}, nil
}

// capture is the state of one Capture call.
type capture struct {
	point    func(name string) error // Store.Point
	root     string
	dir      *os.File // the workspace root, opened: files are opened beneath it
	redactor *workspace.Redactor
	batch    *cas.Batch
	progress progress.Counters
	changes  *changeLog
	dropped  atomic.Bool // a file to read had vanished or was skipped: the tree needs dropVanished
	// skipUnsupported leaves out a file that cannot be read, with a warning.
	skipUnsupported bool

	mu    sync.Mutex // guards stats while files are read
	stats sbxdb.CaptureStats
}

// plan takes the digests the stat cache can vouch for, unless their blobs
// are missing (keys the cache holds that the store does not), marks the
// stale ones it takes for refreshing, and returns the files that must be
// read.
func (c *capture) plan(tree []*walked, cache *statCache, missing, stale []string) []*walked {
	var toRead, hits []*walked
	cursor, files := 0, 0
	for _, w := range tree {
		if w.kind != chain.KindFile {
			continue
		}
		files++
		if sum, key, ok := cache.lookup(&cursor, w.path, w.st); ok {
			w.sum, w.key, w.size = sum, key, w.st.size
			hits = append(hits, w)
			continue
		}
		toRead = append(toRead, w)
	}
	if len(missing) > 0 {
		gone := make(map[string]bool, len(missing))
		for _, k := range missing {
			gone[k] = true
		}
		for _, w := range hits {
			if gone[w.key] {
				toRead = append(toRead, w)
			}
		}
	}
	if len(stale) > 0 { // about once an hour, every key at once (cas.RefreshAfter)
		old := make(map[string]bool, len(stale))
		for _, k := range stale {
			old[k] = true
		}
		var used []string
		for _, w := range hits {
			if old[w.key] {
				used = append(used, w.key)
			}
		}
		c.batch.Refresh(used)
	}
	c.stats.Unchanged = files - len(toRead)
	for _, w := range toRead {
		c.progress.TotalFiles.Add(1)
		c.progress.TotalBytes.Add(w.st.size)
	}
	return toRead
}

// pinArtifacts pins the blobs of the artifacts the checkpoint will name,
// which PutArtifact stored earlier, and fails if one is gone.
func (c *capture) pinArtifacts(ctx context.Context, artifacts []chain.Artifact) error {
	if len(artifacts) == 0 {
		return nil
	}
	keys := make([]string, len(artifacts))
	for i, a := range artifacts {
		keys[i] = a.BlobKey
	}
	missing, err := c.batch.Pin(ctx, keys)
	if err == nil && len(missing) > 0 {
		err = chain.Errorf(chain.ErrMissingBlob, "artifact blob %s is not stored", missing[0])
	}
	return err
}

// newHasher returns one reading goroutine's function: it stores a file's
// (redacted) bytes and records their digest and size in the walked entry,
// which no other goroutine touches. Its buffer is reused from file to file.
func (c *capture) newHasher() func(context.Context, *walked) error {
	buf := make([]byte, 0, 64<<10)
	return func(ctx context.Context, w *walked) error {
		var err error
		buf, err = c.hashFile(ctx, w, buf)
		return err
	}
}

// maxReads bounds how many times a file whose stat moves while it is read
// is read; what the last read saw is then recorded, with a warning.
const maxReads = 3

// errChangedWhileRead stops the storing of a streamed file whose stat
// moved while it was read, so that it is read again and no blob is kept.
var errChangedWhileRead = errors.New("file changed while it was read")

// hashFile stores one file's (redacted) bytes. buf is a reusable buffer,
// returned possibly grown.
//
// The file is opened beneath the workspace root following no symlink
// (vfs.OpenBeneath), and its stat after the read (fstat of the open file)
// is compared with the stat known before it: the walk's for the first read
// of a small file, the open file's at the start of the read for a streamed
// one. A read is consistent when they are equal (size, mtime, ctime, inode,
// device, mode) and it returned as many bytes as the size; otherwise the
// file is read again, up to maxReads times. A file whose final stat is not
// the walk's is reported changed; one that is gone, or no longer a regular
// file, is reported vanished and left out.
func (c *capture) hashFile(ctx context.Context, w *walked, buf []byte) ([]byte, error) {
	prev, prevDev := w.st, w.dev
	fb := progress.NewFile(&c.progress, w.st.size)
	for read := 1; ; read++ {
		if err := ctx.Err(); err != nil {
			return buf, err
		}
		last := read == maxReads
		fb.Restart()
		r, buf2, err := c.readFile(ctx, w, fb, buf, prev, prevDev, last && !c.changes.strict)
		buf = buf2
		if err != nil {
			return buf, err
		}
		if r.skipped || r.gone {
			fb.Drop()
		}
		if r.skipped {
			w.gone = true
			c.dropped.Store(true)
			c.changes.skip(w.path, r.detail)
			return buf, nil
		}
		if r.gone {
			w.gone = true
			c.dropped.Store(true)
			return buf, c.changes.report(w.path, sbxdb.EntryVanished, r.detail)
		}
		if !r.consistent && (!last || c.changes.strict) {
			if c.changes.strict {
				return buf, c.changes.report(w.path, sbxdb.EntryChanged, "the file changed after the walk listed it, or while it was read")
			}
			prev, prevDev = r.st, r.dev
			continue
		}
		if changed := !r.consistent || r.st != w.st || r.dev != w.dev; changed {
			detail := "the file changed after the walk listed it; recorded as read"
			if !r.consistent {
				detail = fmt.Sprintf("the file changed during each of %d reads; the bytes recorded may mix versions", read)
				w.unstable = true
			}
			if err := c.changes.report(w.path, sbxdb.EntryChanged, detail); err != nil {
				return buf, err
			}
		}
		w.sum, w.key, w.size = r.res.Sum, r.res.Key, r.res.Size
		w.st, w.dev, w.exec = r.st, r.dev, r.st.mode&0o111 != 0
		fb.Done()
		c.countRead(r.res)
		return buf, nil
	}
}

// countRead counts a file read and stored. Which blobs were new is known
// once the batch has committed (capture1 counts them then).
func (c *capture) countRead(res cas.AddResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.FilesRead++
	c.stats.BytesRead += res.Size
}

// fileRead is the outcome of one read of a file.
type fileRead struct {
	res        cas.AddResult // what was stored; zero if nothing was
	st         fileStat      // the file's stat at the end of the read
	dev        uint64
	consistent bool   // st was the stat before the read, and the bytes were its size
	gone       bool   // nothing to read: vanished, or not a regular file now
	skipped    bool   // the file cannot be opened or read, and is left out
	detail     string // why gone or skipped
}

// unreadable is the outcome of a file that cannot be opened or read: an
// error, or when unsupported entries are skipped, a read that leaves it out.
func (c *capture) unreadable(w *walked, err error) (fileRead, error) {
	if !c.skipUnsupported {
		return fileRead{}, unreadableEntry("reading %q: %s", w.path, err)
	}
	return fileRead{skipped: true, detail: "cannot be read: " + errReason(err)}, nil
}

// readFile reads the file of w once, counting the bytes read in fb, and
// stores them if the read was consistent (see hashFile) or
// keepInconsistent is set. prev and prevDev are the stat a small file must
// still have once read.
func (c *capture) readFile(ctx context.Context, w *walked, fb *progress.File, buf []byte, prev fileStat, prevDev uint64, keepInconsistent bool) (fileRead, []byte, error) {
	var out fileRead
	f, err := vfs.OpenBeneath(c.dir, w.path)
	if err == nil {
		if perr := c.point("capture.open"); perr != nil { // an injected failure to open
			f.Close()
			f, err = nil, perr
		}
	}
	if err != nil {
		if vfs.IsGone(err) {
			return fileRead{gone: true, detail: "the file vanished, or became a symlink, before it was read"}, buf, nil
		}
		out, err = c.unreadable(w, err)
		return out, buf, err
	}
	defer f.Close()
	notRegular := fileRead{gone: true, detail: "the file was replaced by something other than a regular file before it was read"}
	if w.st.size <= smallFile {
		var rerr error
		want := prev.size // a consistent read ends there: the stat after it must still say so
		if keepInconsistent {
			want = -1 // recorded whatever its stat says: read to the end
		}
		buf, rerr = readAll(f, buf[:0], want, smallFile)
		fb.Add(int64(len(buf)))
		if err := c.point("capture.fileRead"); err != nil {
			return out, buf, err
		}
		st, dev, err := fstatOpen(f, c.root, w.path)
		if err != nil {
			return out, buf, unreadableEntry("reading %q: %s", w.path, err)
		}
		if !isRegular(st) {
			return notRegular, buf, nil
		}
		switch {
		case rerr == errTooBig: // it grew since the walk: stream it
			fb.Restart()
			if err := f.Rewind(); err != nil {
				return out, buf, unreadableEntry("reading %q: %s", w.path, err)
			}
		case rerr != nil:
			out, err = c.unreadable(w, rerr)
			return out, buf, err
		default:
			out.st, out.dev = st, dev
			out.consistent = st == prev && dev == prevDev && int64(len(buf)) == st.size
			if !out.consistent && !keepInconsistent {
				return out, buf, nil
			}
			c.redactor.Redact(buf)
			// Looked up with the keys of other files, a request per
			// thousands of files (NewBlobs counts the new ones).
			out.res, err = c.batch.AddDeferred(ctx, cas.Files, buf)
			if err != nil {
				err = fmt.Errorf("capture %q: %w", w.path, err)
			}
			return out, buf, err
		}
	}
	before, beforeDev, err := fstatOpen(f, c.root, w.path)
	if err != nil {
		return out, buf, unreadableEntry("reading %q: %s", w.path, err)
	}
	if !isRegular(before) {
		return notRegular, buf, nil
	}
	sr := &streamReader{f: f, point: c.point, fb: fb}
	sr.atEOF = func() error {
		if err := c.point("capture.fileRead"); err != nil {
			return err
		}
		st, dev, err := fstatOpen(f, c.root, w.path)
		if err != nil {
			return err
		}
		out.st, out.dev = st, dev
		out.consistent = st == before && dev == beforeDev && sr.n == st.size
		if !out.consistent && !keepInconsistent {
			return errChangedWhileRead
		}
		return nil
	}
	out.res, err = c.batch.AddReader(ctx, cas.Files, c.redactor.Reader(sr))
	if errors.Is(err, errChangedWhileRead) {
		return out, buf, nil
	}
	if err != nil && sr.readErr != nil {
		out, err = c.unreadable(w, sr.readErr)
		return out, buf, err
	}
	if err != nil {
		return out, buf, fmt.Errorf("capture %q: %w", w.path, err)
	}
	return out, buf, nil
}

// streamReader reads a streamed file for the blob store and, at the end of
// the file, calls atEOF once, whose error, if any, replaces io.EOF from
// then on. (The blob store's AddReader stops between chunks once its
// context ends.)
type streamReader struct {
	f       *vfs.Reader
	point   func(string) error
	fb      *progress.File // counts each read in the progress
	n       int64          // bytes read
	atEOF   func() error
	ended   bool
	endErr  error // atEOF's error, or io.EOF
	readErr error // the file's read failed
}

func (s *streamReader) Read(p []byte) (int, error) {
	if s.ended {
		return 0, s.endErr
	}
	n, err := s.f.Read(p)
	s.n += int64(n)
	if n > 0 {
		s.fb.Add(int64(n))
	}
	switch {
	case err != nil && err != io.EOF:
		s.readErr = err
	case err == io.EOF:
		s.ended, s.endErr = true, io.EOF
		if eerr := s.atEOF(); eerr != nil {
			s.endErr = eerr
		}
		return n, s.endErr
	case err == nil:
		if perr := s.point("capture.streamed"); perr != nil {
			return n, perr
		}
	}
	return n, err
}

// dropVanished removes the files that vanished before they could be read,
// and records as an empty directory each directory that has nothing
// recorded beneath it any more, as the walk would have. tree is sorted by
// path, and so is the result.
func dropVanished(tree []*walked) []*walked {
	out := make([]*walked, 0, len(tree))
	var parents []string
	for i := range tree {
		if !tree[i].gone {
			out = append(out, tree[i])
		} else if d := path.Dir(tree[i].path); d != "." {
			parents = append(parents, d)
		}
	}
	emptied := map[string]bool{}
	for _, d := range parents {
		i, _ := slices.BinarySearchFunc(out, d+"/", func(w *walked, p string) int { return strings.Compare(w.path, p) })
		if i == len(out) || !strings.HasPrefix(out[i].path, d+"/") {
			emptied[d] = true
		}
	}
	if len(emptied) == 0 {
		return out
	}
	for d := range emptied {
		out = append(out, &walked{path: d, kind: chain.KindDir})
	}
	slices.SortFunc(out, func(a, b *walked) int { return strings.Compare(a.path, b.path) })
	return out
}

// count sets the manifest's entry counts and total size in the stats, and
// the counts of the warnings and of what the policy excluded.
func (c *capture) count(tree []*walked, excluded map[string]int) {
	if excluded == nil {
		excluded = map[string]int{}
	}
	c.stats.ExcludedByRule, c.stats.Excluded = excluded, 0
	for _, n := range excluded {
		c.stats.Excluded += n
	}
	c.stats.Files, c.stats.Dirs, c.stats.Symlinks, c.stats.Bytes = 0, 0, 0, 0
	for i := range tree {
		switch tree[i].kind {
		case chain.KindFile:
			c.stats.Files++
			c.stats.Bytes += tree[i].size
		case chain.KindDir:
			c.stats.Dirs++
		case chain.KindSymlink:
			c.stats.Symlinks++
		}
	}
	for _, w := range c.changes.warnings {
		switch w.What {
		case sbxdb.EntryChanged:
			c.stats.Changed++
		case sbxdb.EntryVanished:
			c.stats.Vanished++
		case sbxdb.EntrySkipped:
			c.stats.Skipped++
		}
	}
}

// emptyCapture is the error of a capture that RequireFiles stopped.
func emptyCapture(pol *workspace.Policy, root string, excluded int) error {
	entries := "entries"
	if excluded == 1 {
		entries = "entry"
	}
	inc := pol.IncludePatterns()
	if len(inc) == 0 {
		return fmt.Errorf("%w: %s holds no file the policy records (%d %s excluded by policy)", sbxdb.ErrEmptyCapture, root, excluded, entries)
	}
	quoted := make([]string, len(inc))
	for i, g := range inc {
		quoted[i] = strconv.Quote(g)
	}
	return fmt.Errorf("%w: includes %s match no file in %s (%d %s excluded by policy)",
		sbxdb.ErrEmptyCapture, strings.Join(quoted, ", "), root, excluded, entries)
}

// manifest builds the checkpoint's entries from the walk, every file's
// digest and size known.
func manifest(tree []*walked) []chain.Entry {
	out := make([]chain.Entry, len(tree))
	for i, w := range tree {
		e := chain.Entry{Path: w.path, Kind: w.kind}
		switch w.kind {
		case chain.KindFile:
			e.BlobKey, e.Size, e.Executable = w.key, w.size, w.exec
		case chain.KindSymlink:
			e.Target = w.target
		}
		out[i] = e
	}
	return out
}

// commitCapture appends the captured checkpoint on the thread's current
// head in the transaction that indexes the batch's blobs, once their bytes
// are durable: the checkpoint and the blobs it names commit together, or
// nothing does.
//
// deletions is the blob index's deletion count read before the batch's
// first lookup: when the committing transaction sees another, a blob the
// batch found may be gone (a sweep of another process, which pins do not
// hold back), and every blob the checkpoint names is looked up again.
func commitCapture(ctx context.Context, st Store, batch *cas.Batch, in *sbxdb.CaptureInput, files []chain.Entry, deletions uint64) (*chain.Checkpoint, error) {
	head, err := st.Head(ctx, in.Writer.ThreadID)
	if err != nil {
		return nil, err
	}
	// cp shares no memory with the caller's input (files is the
	// capture's own) nor with the store (appendTx copies it), so it is
	// returned as it is: copying the manifest again costs its whole size.
	cp := &chain.Checkpoint{
		ID: in.ID, ThreadID: in.Writer.ThreadID, ParentID: head, CreatedAt: in.CreatedAt,
		Reason: in.Reason, Label: in.Label, SourceRunID: in.SourceRunID,
		Files: files, Conversation: chain.CloneMessages(in.Conversation),
		Artifacts: append(make([]chain.Artifact, 0, len(in.Artifacts)), in.Artifacts...),
	}
	if cp.ID == "" {
		cp.ID = lease.NewToken()
	}
	if cp.Reason == "" {
		cp.Reason = chain.ReasonAutomatic
	}
	if cp.CreatedAt == 0 {
		cp.CreatedAt = st.NowMs()
	}
	app := chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: in.Writer}
	appendFn, err := st.AppendTx(&app)
	if err != nil {
		return nil, err
	}
	fn := func(tx kv.Tx) error {
		if err := requireBlobs(tx, batch, deletions, cp); err != nil {
			return err
		}
		return appendFn(tx)
	}
	if err := batch.CommitWith(ctx, fn); err != nil {
		if chain.Code(err) == "" {
			err = fmt.Errorf("capture: %w", err)
		}
		return nil, err
	}
	return cp, nil
}

// unknownDeletions stands for a deletion count that could not be read: no
// transaction sees it, so the commit looks every blob up again.
const unknownDeletions = ^uint64(0)

// requireBlobs fails with errBlobSwept when the blob index's deletion
// count moved past deletions and a blob cp names is neither stored nor
// added by batch.
func requireBlobs(tx kv.Tx, batch *cas.Batch, deletions uint64, cp *chain.Checkpoint) error {
	if now, err := cas.DeletionsIn(tx); err == nil && now == deletions {
		return nil
	}
	keys := make([]string, 0, len(cp.Files)+len(cp.Artifacts))
	for i := range cp.Files {
		if cp.Files[i].Kind == chain.KindFile {
			keys = append(keys, cp.Files[i].BlobKey)
		}
	}
	for i := range cp.Artifacts {
		keys = append(keys, cp.Artifacts[i].BlobKey)
	}
	if missing := batch.MissingIn(tx, keys); missing != "" {
		return fmt.Errorf("%w: %s", errBlobSwept, missing)
	}
	return nil
}

// errTooBig reports a file that grew past the in-memory limit.
var errTooBig = errors.New("file grew past the in-memory limit")

// readAll reads r into buf until it ends or, when want is above 0, holds
// want bytes, or fails with errTooBig past limit bytes. Stopping at want
// saves the read that would only find the end: a caller that stops there
// must check, as the stat after the read does, that the file is still want
// bytes long. A size of 0 vouches for nothing (procfs, sysfs and some FUSE
// files stat as empty whatever they hold), so such a file is read to its
// end, and a read that finds bytes does not match its stat.
func readAll(r io.Reader, buf []byte, want int64, limit int) ([]byte, error) {
	if want > int64(limit) || want == 0 {
		want = -1
	}
	if need := int(want) - len(buf); need > cap(buf)-len(buf) {
		buf = slices.Grow(buf, max(need, cap(buf))) // by at least its capacity: a reused buffer grows a few times, not once per size
	}
	for {
		if int64(len(buf)) == want {
			return buf, nil
		}
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return buf, errTooBig
			}
			buf = slices.Grow(buf, max(cap(buf), 4096))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if len(buf) > limit {
				return buf, errTooBig
			}
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
