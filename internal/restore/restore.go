// Package restore writes a checkpoint's tree into a directory: staged
// beside or inside the target, every blob verified as it is written, and
// made visible only once all is well (SPEC §6.5, §10 Q20). It reads the
// blob store (cas) and changes files only through a vfs.FS, behind the
// narrow Store interface the engine hands it; it knows nothing of the
// metadata, transactions or leases. Files: restore.go (the staging and the
// writes), sparse*.go (holes), pin*.go (writing through a directory's
// descriptor).
package restore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/flock"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/internal/progress"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/workspace"
)

// Store is what a restore needs of the store it reads: the blob store,
// the FS every change to the target goes through (vfs.FS), and the test
// hooks by name (storetest.Subject.OnPoint; nil-returning in production).
// The engine implements it over its DB.
type Store interface {
	Blobs() Blobs
	FS() vfs.FS
	Point(name string) error
}

// Blobs is what a restore reads of the blob store (cas.Store).
type Blobs interface {
	// ReadEach calls fn for each key's verified bytes, in the order the
	// blobs lie on disk, on up to workers goroutines.
	ReadEach(ctx context.Context, keys []string, workers int, fn func(key string, r *cas.Reader) error) error
	// Open returns a reader of key's bytes, verified as they stream.
	Open(ctx context.Context, key string) (*cas.Reader, error)
}

// restorer is one restore's view of its store.
type restorer struct {
	fs    vfs.FS
	blobs Blobs
	point func(name string) error
}

// Checkpoint writes the tree of checkpoint cp into dir, which must not
// exist or be an empty directory (SPEC §10 Q20), or with o.Overwrite any
// directory (see restoreOverwrite); with o.Paths, only the entries they
// name. With o.KeepGoing a file whose blob is missing or damaged is left
// out and named in the stats (writeKeepGoing) instead of failing all. Everything is written into a staging directory, each
// blob verified (present, sha256, size) as it is written, and nothing
// becomes visible in dir before all is well: on any error, and when ctx
// ends, nothing is left behind. A missing blob is
// SANDBOX_SNAPSHOT_MISSING_BLOB and a damaged one
// SANDBOX_SNAPSHOT_INVALID_BLOB, naming the path and the key. o is not
// nil; the restore does not keep it.
//
// A dir that does not exist is staged beside it and the staging directory
// renamed to dir. An existing empty dir is kept (its mode, owner, inode; it
// may be a mount point): the staging directory is made inside it, and once
// everything is written and verified each of its entries is renamed into
// dir and the staging directory removed. A failure while the entries are
// moved moves the moved ones back (or, failing that, removes them) and
// removes the staging directory, so dir is left empty, as it was. A killed
// restore leaves its staging directory; the next restore into the same
// parent, or into the same dir, removes it (see removeStaleStaging). One
// killed while it moved entries into dir also leaves those: dir is then
// not empty, and a restore into it refused until it is emptied.
//
// No write escapes dir: paths are checked (no "..", no absolute or drive
// paths, nothing beneath a file or symlink), files are created with
// O_EXCL|O_NOFOLLOW, symlinks are created last, and the existing target
// and the staging directory are opened without following a symlink and
// written through their descriptors (see staging), whatever another user
// renames meanwhile. Files get mode 0755 when
// recorded executable, 0644 otherwise. Long runs of zero bytes are left as
// holes (see sparseWriter). Restored files are not fsynced: like tar, a
// restore produces a working copy that the store can reproduce.
func Checkpoint(ctx context.Context, st Store, cp *chain.Checkpoint, dir string, o *sbxdb.RestoreOptions) (sbxdb.RestoreStats, error) {
	rs := &restorer{fs: st.FS(), blobs: st.Blobs(), point: st.Point}
	var stats sbxdb.RestoreStats
	if err := checkRestoreManifest(cp.Files, o); err != nil {
		return stats, err
	}
	files, err := selectEntries(cp.ID, cp.Files, o.Paths)
	if err != nil {
		return stats, err
	}
	switch {
	case o.Delete && !o.Overwrite:
		return stats, errors.New("restore: Delete needs Overwrite")
	case o.Delete && len(o.Paths) > 0:
		return stats, errors.New("restore: Delete restores the whole tree: give no Paths")
	}
	target, err := filepath.Abs(dir)
	if err != nil {
		return stats, err
	}
	dirFile, err := checkTarget(target, o.Overwrite)
	if err != nil {
		return stats, err
	}
	if dirFile != nil {
		defer dirFile.Close()
		if o.Overwrite {
			return rs.restoreOverwrite(ctx, files, target, dirFile, o)
		}
		return rs.restoreIntoDir(ctx, files, target, dirFile, o)
	}
	parent := filepath.Dir(target)
	created, err := mkdirAllTracked(rs.fs, parent)
	if err != nil {
		return stats, fmt.Errorf("restore: creating %s: %w", parent, err)
	}
	removeStaleStaging(parent)
	pst, err := os.Stat(parent)
	stg, err := rs.makeStaging(parent, err != nil || sharedDir(pst))
	if err != nil {
		removeCreated(created)
		return stats, err
	}
	defer stg.f.Close()
	if err := rs.restoreInto(ctx, files, stg.root, true, o, &stats); err != nil {
		os.RemoveAll(stg.path)
		removeCreated(created)
		return sbxdb.RestoreStats{}, stg.unpin(err)
	}
	if err := rs.fs.Rename(stg.path, target); err != nil {
		os.RemoveAll(stg.path)
		removeCreated(created)
		return sbxdb.RestoreStats{}, fmt.Errorf("restore: %w", err)
	}
	return stats, nil
}

// restoreIntoDir restores files into target, an existing empty directory
// (open as dir), keeping the directory itself: it stages inside target
// (the same file system as the final entries, so each move is a rename)
// and moves the staging directory's entries up once all is written and
// verified. On any failure target is left empty: the entries moved so far
// are moved back (a move back that fails removes the entry) and the
// staging directory removed. The clean-up bypasses the FS, as every
// clean-up after a failure does. Target is used through dir (see
// pinnedPath): whatever is renamed meanwhile, the restore stays in the
// directory checkTarget found empty.
func (rs *restorer) restoreIntoDir(ctx context.Context, files []chain.Entry, target string, dir *os.File, o *sbxdb.RestoreOptions) (sbxdb.RestoreStats, error) {
	troot := pinnedPath(dir, target)
	st, err := dir.Stat()
	stg, err := rs.makeStaging(troot, err != nil || sharedDir(st))
	if err != nil {
		return sbxdb.RestoreStats{}, unpinError(err, troot, target)
	}
	defer stg.f.Close()
	fail := func(err error) (sbxdb.RestoreStats, error) {
		os.RemoveAll(stg.path)
		return sbxdb.RestoreStats{}, unpinError(stg.unpin(err), troot, target)
	}
	var stats sbxdb.RestoreStats
	if err := rs.restoreInto(ctx, files, stg.root, false, o, &stats); err != nil {
		return fail(err)
	}
	names, err := readNames(stg.root)
	if err != nil {
		return fail(fmt.Errorf("restore: %w", err))
	}
	moveBack := func(moved []string) {
		for _, name := range moved {
			to := filepath.Join(troot, name)
			if os.Rename(to, filepath.Join(stg.root, name)) != nil {
				os.RemoveAll(to)
			}
		}
	}
	for i, name := range names {
		if err := rs.fs.Rename(filepath.Join(stg.root, name), filepath.Join(troot, name)); err != nil {
			moveBack(names[:i])
			return fail(fmt.Errorf("restore: %w", err))
		}
	}
	if err := rs.fs.Remove(stg.path); err != nil {
		moveBack(names)
		return fail(fmt.Errorf("restore: %w", err))
	}
	return stats, nil
}

// staging is a restore's staging directory, open (f, which holds its
// lock). path is its name in the directory it was made in, root the path
// the restore writes through: the open directory's (pinnedPath), so that
// renaming the staging directory, or putting a symlink in its place,
// sends no write elsewhere.
type staging struct {
	path, root string
	f          *os.File
}

// makeStaging makes a staging directory in dir, opens it without following
// a symlink and takes its lock (held until it is closed: no other
// restore's clean-up removes a directory whose lock it cannot take,
// whatever it concludes of the owner's name). If dir is shared (another
// user may rename its entries: see sharedDir), the directory opened must
// be this process's user's: one swapped in for it between the mkdir and
// the open is refused.
func (rs *restorer) makeStaging(dir string, shared bool) (*staging, error) {
	p, err := rs.fs.MkdirTemp(dir, StagingName(proc.Self())+"*")
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	f, err := openDirNoFollow(p)
	if err == nil && shared {
		err = checkOwn(f)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, chain.Errorf(chain.ErrInvalidWorkspace, "restore: the staging directory %s was replaced as it was made: %v", p, err)
	}
	flock.TryLock(f, true) // the lock only guards against a clean-up misjudging its owner
	return &staging{path: p, root: pinnedPath(f, p), f: f}, nil
}

// unpin returns err with the staging directory named by its path, not by
// its descriptor.
func (s *staging) unpin(err error) error { return unpinError(err, s.root, s.path) }

// unpinError returns err with every mention of root (a descriptor's path,
// /proc/self/fd/N) in its message replaced by path, the name it stands
// for; errors.Is and errors.As see err unchanged.
func unpinError(err error, root, path string) error {
	if err == nil || root == path || !strings.Contains(err.Error(), root) {
		return err
	}
	msg := err.Error()
	var b strings.Builder
	for {
		i := strings.Index(msg, root)
		if i < 0 {
			break
		}
		j := i + len(root)
		if j < len(msg) && msg[j] >= '0' && msg[j] <= '9' { // another descriptor
			b.WriteString(msg[:j])
		} else {
			b.WriteString(msg[:i])
			b.WriteString(path)
		}
		msg = msg[j:]
	}
	b.WriteString(msg)
	return &renamedError{msg: b.String(), err: err}
}

// renamedError is err with another message.
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

// openDirNoFollow opens the directory name for reading; a symlink in its
// place is an error.
func openDirNoFollow(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
}

// readNames returns the names in directory dir, sorted.
func readNames(dir string) ([]string, error) {
	f, err := vfs.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// selectEntries returns the entries of files that paths select (all of
// them when paths is empty), in the manifest's order: the entry each path
// names and every entry beneath it. Any path that is malformed or selects
// nothing is an error, before anything is written.
func selectEntries(cpID string, files []chain.Entry, paths []string) ([]chain.Entry, error) {
	if len(paths) == 0 {
		return files, nil
	}
	clean := make([]string, len(paths))
	for i, p := range paths {
		c, err := cleanRestorePath(p)
		if err != nil {
			return nil, err
		}
		clean[i] = c
	}
	// The paths beneath p are those with the prefix p+"/": one contiguous
	// range of the sorted paths.
	order := make([]int, len(files))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(files[a].Path, files[b].Path) })
	find := func(p string) int {
		i, _ := slices.BinarySearchFunc(order, p, func(j int, p string) int { return strings.Compare(files[j].Path, p) })
		return i
	}
	keep := make([]bool, len(files))
	n := 0
	mark := func(j int) {
		if !keep[j] {
			keep[j] = true
			n++
		}
	}
	for _, p := range clean {
		found := false
		if i := find(p); i < len(order) && files[order[i]].Path == p {
			mark(order[i])
			found = true
		}
		below := p + "/"
		for i := find(below); i < len(order) && strings.HasPrefix(files[order[i]].Path, below); i++ {
			mark(order[i])
			found = true
		}
		if !found {
			return nil, &sbxdb.PathNotFoundError{Path: p, Checkpoint: cpID}
		}
	}
	out := make([]chain.Entry, 0, n)
	for i := range files {
		if keep[i] {
			out = append(out, files[i])
		}
	}
	return out, nil
}

// cleanRestorePath checks a path of RestoreOptions.Paths and cleans it
// into the form of a manifest path: "." segments, repeated and trailing
// slashes are dropped; an empty, absolute or drive path, a NUL, a
// backslash, a ".." segment or the root itself is
// SANDBOX_SNAPSHOT_INVALID_PATH.
func cleanRestorePath(p string) (string, error) {
	bad := func(why string) error { return chain.Errorf(chain.ErrInvalidPath, "restore path %q %s", p, why) }
	switch {
	case p == "":
		return "", bad("is empty")
	case strings.IndexByte(p, 0) >= 0:
		return "", bad("contains NUL")
	case p[0] == '/':
		return "", bad("is absolute")
	case strings.IndexByte(p, '\\') >= 0:
		return "", bad("contains a backslash")
	case len(p) >= 2 && p[1] == ':':
		return "", bad("has a drive prefix")
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "", bad("has a .. segment")
		}
	}
	c := path.Clean(p)
	if c == "." {
		return "", bad("names the root: restore the whole tree by naming no path")
	}
	return c, nil
}

// checkRestoreManifest refuses, before anything is written, a manifest a
// restore must not write (SPEC §6.5): bad paths (the restore side also
// refuses any "X:" prefix), entries the policy would not have captured,
// duplicates, entries beneath a file or symlink, symlinks that escape.
func checkRestoreManifest(files []chain.Entry, o *sbxdb.RestoreOptions) error {
	if err := chain.ValidateFiles(files); err != nil {
		return chain.Errorf(chain.ErrInvalidPath, "%v", err)
	}
	for i := range files {
		e := &files[i]
		p := e.Path
		// ValidateFiles applied the store's path rules; the restore side
		// also refuses any drive-like "X:" prefix (SPEC §6.5).
		if len(p) >= 2 && p[1] == ':' {
			return chain.Errorf(chain.ErrInvalidPath, "manifest path %q cannot be restored", p)
		}
		if !o.Policy.Admits(p, e.Kind) {
			return chain.Errorf(chain.ErrInvalidPath, "manifest path %q is excluded by the restore policy", p)
		}
		if e.Kind == chain.KindSymlink {
			if err := workspace.CheckLinkTarget(p, e.Target); err != nil {
				return err
			}
		}
	}
	if o.AllowEscapingSymlinks {
		return nil
	}
	links := map[string]string{}
	for i := range files {
		if files[i].Kind == chain.KindSymlink {
			links[files[i].Path] = files[i].Target
		}
	}
	return workspace.CheckLinks(links)
}

// checkTarget accepts a target that does not exist (it returns nil) or is
// an empty directory (any directory if nonEmpty), which it returns open: a symlink in its place is
// refused, and the directory opened is the one the restore writes into,
// whatever is renamed meanwhile. The staging directories of killed
// restores into it are removed first (removeStaleStaging), so a killed
// restore does not leave the target unusable.
func checkTarget(target string, nonEmpty bool) (*os.File, error) {
	f, err := openDirNoFollow(target)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		if st, lerr := os.Lstat(target); lerr == nil && !st.IsDir() {
			return nil, chain.Errorf(chain.ErrInvalidWorkspace, "restore target %s exists and is not a directory", target)
		}
		return nil, chain.Errorf(chain.ErrInvalidWorkspace, "restore target %s: %v", target, err)
	}
	removeStaleStaging(pinnedPath(f, target))
	if nonEmpty {
		return f, nil
	}
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		f.Close()
		return nil, chain.Errorf(chain.ErrInvalidWorkspace, "restore target %s is not empty", target)
	}
	return f, nil
}

// restoreInto writes the entries files into the empty directory root,
// which gets mode 0755 if chmodRoot (it becomes the target).
func (rs *restorer) restoreInto(ctx context.Context, files []chain.Entry, root string, chmodRoot bool, o *sbxdb.RestoreOptions, stats *sbxdb.RestoreStats) error {
	if chmodRoot {
		if err := rs.fs.Chmod(root, 0o755); err != nil {
			return err
		}
	}
	// Directories first, parents before children: every ancestor of an
	// entry and every dir entry.
	dirs := map[string]bool{}
	var regular, links []*chain.Entry
	var prog progress.Counters
	for i := range files {
		e := &files[i]
		for j := 0; j < len(e.Path); j++ {
			if e.Path[j] == '/' {
				dirs[e.Path[:j]] = true
			}
		}
		switch e.Kind {
		case chain.KindDir:
			dirs[e.Path] = true
			stats.Dirs++
		case chain.KindFile:
			regular = append(regular, e)
			prog.TotalFiles.Add(1)
			prog.TotalBytes.Add(e.Size)
		case chain.KindSymlink:
			links = append(links, e)
		}
	}
	ordered := make([]string, 0, len(dirs))
	for d := range dirs {
		ordered = append(ordered, d)
	}
	slices.SortFunc(ordered, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	// The directories are made while writeFiles looks the blobs up and
	// orders them (each some tens of milliseconds for 20,000 files); no
	// file is written before they all exist, and restoreInto does not
	// return before the last one is made.
	made := make(chan struct{})
	var dirsErr error // set before made is closed
	go func() {
		defer close(made)
		for _, d := range ordered {
			if err := rs.fs.Mkdir(filepath.Join(root, filepath.FromSlash(d)), 0o755); err != nil {
				dirsErr = fmt.Errorf("restore: %w", err)
				return
			}
		}
	}()
	dirsMade := func() error { <-made; return dirsErr }
	stop := progress.Report(o.Progress, &prog)
	skipped, err := rs.writeKeepGoing(ctx, root, regular, &prog, dirsMade, o.KeepGoing)
	stop()
	if derr := dirsMade(); err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	stats.Files = len(regular) - len(skipped)
	stats.Skipped = append(stats.Skipped, skipped...)
	stats.Bytes = prog.Bytes.Load()
	// Links last, so no write above can pass through one.
	for _, e := range links {
		if err := rs.fs.Symlink(e.Target, filepath.Join(root, filepath.FromSlash(e.Path))); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		stats.Symlinks++
	}
	return nil
}

// writeFiles writes the files' bytes, verified, blob by blob in the order
// the blobs lie on disk (cas.Store.ReadEach): every block of small blobs is
// read and decoded once, and every pack read front to back, whatever the
// paths' order. A blob that several entries name is read once, written to
// the first of them and copied from there to the others. No file is
// created before dirsMade returns; its error, like any other, stops all.
// The end of ctx stops a large file between two chunks of its bytes, and
// a copy between two copyChunk-sized pieces.
func (rs *restorer) writeFiles(ctx context.Context, root string, files []*chain.Entry, prog *progress.Counters, dirsMade func() error, done func(key string)) error {
	byKey := make(map[string][]*chain.Entry, len(files))
	keys := make([]string, 0, len(files))
	for _, e := range files {
		if byKey[e.BlobKey] == nil {
			keys = append(keys, e.BlobKey)
		}
		byKey[e.BlobKey] = append(byKey[e.BlobKey], e)
	}
	err := rs.blobs.ReadEach(ctx, keys, runtime.GOMAXPROCS(0)+2, func(key string, r *cas.Reader) error {
		if err := dirsMade(); err != nil {
			return err
		}
		es := byKey[key]
		for i, e := range es {
			if r.Size() != e.Size {
				return chain.Errorf(chain.ErrInvalidBlob, "%q: blob %s has %d bytes, the manifest says %d", e.Path, e.BlobKey, r.Size(), e.Size)
			}
			var err error
			fb := progress.NewFile(prog, e.Size)
			if i == 0 {
				// r checks ctx between the chunks of a large blob.
				err = rs.writeFile(root, e, func(f vfs.File) error {
					if e.Size < sparseMin {
						_, err := io.Copy(f, &entryReader{r: r, e: e})
						return err
					}
					w := newSparseWriter(f)
					cw := &countedWriter{w: w, fb: fb, point: rs.point}
					if _, err := io.Copy(cw, &entryReader{r: r, e: e}); err != nil {
						return err
					}
					return w.finish()
				})
			} else { // written and verified: copy it
				err = rs.copyFile(ctx, root, es[0], e, fb)
			}
			if err != nil {
				return &keyError{key: key, err: err}
			}
			fb.Done()
		}
		done(key)
		return nil
	})
	if _, ok := errors.AsType[*keyError](err); ok {
		return err
	}
	if ce, ok := errors.AsType[*sbxdb.BlobError](err); ok && byKey[ce.Key] != nil {
		err = &keyError{key: ce.Key, err: blobError(byKey[ce.Key][0], err)} // a lookup or a read failed: name the path
	}
	return err
}

// countedWriter counts in the progress each chunk written through it (a
// large blob's bytes come in chunks of 64 to 256 KiB: cas.Reader.WriteTo)
// and runs the test hook "restore.chunk" after each.
type countedWriter struct {
	w     io.Writer
	fb    *progress.File
	point func(string) error
}

func (c *countedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.fb.Add(int64(n))
	if err == nil {
		err = c.point("restore.chunk")
	}
	return n, err
}

// copyChunk is how much of a file copyFile copies between two looks at
// its context: on Linux one copy_file_range call, which no context
// interrupts.
const copyChunk = 64 << 20

// copyFile writes entry e as a copy of the restored file of entry from,
// stopping between chunks once ctx ends. Each chunk goes through the new
// file's ReadFrom (on Linux, copy_file_range: the bytes never leave the
// kernel), except from a file with holes, whose data only is copied
// through a sparseWriter (copySparse), so the copy has the same holes.
// Each chunk is counted in fb as it is written.
func (rs *restorer) copyFile(ctx context.Context, root string, from, e *chain.Entry, fb *progress.File) error {
	src, err := vfs.Open(filepath.Join(root, filepath.FromSlash(from.Path)))
	if err != nil {
		return fmt.Errorf("restore %q: %w", e.Path, err)
	}
	defer src.Close()
	return rs.writeFile(root, e, func(f vfs.File) error {
		if e.Size >= sparseMin && hasHole(src, e.Size) {
			return copySparse(ctx, src, f, e.Size, fb)
		}
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := io.Copy(f, io.LimitReader(src, copyChunk))
			fb.Add(n)
			if err != nil || n < copyChunk {
				return err
			}
		}
	})
}

// writeFile creates the file of entry e and fills it with fill: an
// entryReader's WriteTo writes a packed blob's bytes in one call.
func (rs *restorer) writeFile(root string, e *chain.Entry, fill func(f vfs.File) error) error {
	mode := os.FileMode(0o644)
	if e.Executable {
		mode = 0o755
	}
	f, err := rs.fs.OpenFile(filepath.Join(root, filepath.FromSlash(e.Path)), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return fmt.Errorf("restore %q: %w", e.Path, err)
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(mode) // exact, whatever the umask
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil && chain.Code(err) == "" {
		err = fmt.Errorf("restore %q: %w", e.Path, err)
	}
	return err
}

// OpenEntry returns a reader of the verified bytes of the file entry e
// (streamed; see cas.Store.Open: the bytes are only known good once Read
// returns io.EOF). Every blob error, at open or while reading, is
// SANDBOX_SNAPSHOT_MISSING_BLOB or SANDBOX_SNAPSHOT_INVALID_BLOB naming the
// path and the key; a blob whose size is not the entry's is INVALID_BLOB.
func OpenEntry(ctx context.Context, blobs Blobs, e *chain.Entry) (io.ReadCloser, error) {
	if e.Kind != chain.KindFile {
		return nil, fmt.Errorf("%q is a %s, not a file", e.Path, e.Kind)
	}
	r, err := blobs.Open(ctx, e.BlobKey)
	if err != nil {
		return nil, blobError(e, err)
	}
	if r.Size() != e.Size {
		r.Close()
		return nil, chain.Errorf(chain.ErrInvalidBlob, "%q: blob %s has %d bytes, the manifest says %d", e.Path, e.BlobKey, r.Size(), e.Size)
	}
	return &entryReader{r: r, e: e}, nil
}

type entryReader struct {
	r *cas.Reader
	e *chain.Entry
}

func (er *entryReader) Read(p []byte) (int, error) {
	n, err := er.r.Read(p)
	if err != nil && err != io.EOF {
		err = blobError(er.e, err)
	}
	return n, err
}

// WriteTo writes the entry's bytes to w through cas.Reader.WriteTo (a
// packed blob's verified bytes in one write, not copied through a buffer).
// Errors reading the blob get the contract's codes, as from Read.
func (er *entryReader) WriteTo(w io.Writer) (int64, error) {
	n, err := er.r.WriteTo(w)
	if _, ok := errors.AsType[*sbxdb.BlobError](err); ok {
		err = blobError(er.e, err)
	}
	return n, err
}

func (er *entryReader) Close() error { return er.r.Close() }

// blobError turns a blob store error into the contract's code, naming the
// path and the key.
func blobError(e *chain.Entry, err error) error {
	switch {
	case errors.Is(err, sbxdb.ErrBlobNotFound):
		return chain.Errorf(chain.ErrMissingBlob, "%q: blob %s is missing", e.Path, e.BlobKey)
	case errors.Is(err, sbxdb.ErrBlobCorrupt), errors.Is(err, sbxdb.ErrInvalidBlobKey):
		why := err.Error()
		if ce, ok := errors.AsType[*sbxdb.BlobError](err); ok {
			why = ce.Err.Error()
			if ce.Detail != "" {
				why += ": " + ce.Detail
			}
		}
		return chain.Errorf(chain.ErrInvalidBlob, "%q: blob %s is damaged: %s", e.Path, e.BlobKey, why)
	}
	return fmt.Errorf("restore %q: %w", e.Path, err)
}

// A staging directory is named for the process that made it:
// .sbxdb-restore-<host>-<boot>-<pid>-<start>-<random>, where host and boot
// are the first 8 bytes, in hex, of the sha256 of the host name and of the
// kernel's boot id with the process's pid namespace, start the process's
// start time in clock ticks since boot (proc.Identity), and random what
// MkdirTemp adds. So a later restore can tell a staging directory whose
// restore was killed from one still being written, by this or another
// process. The restore also holds an flock on its staging directory while
// it writes (lockStaging), which a clean-up must be able to take.
const stagingPrefix = ".sbxdb-restore-"

// StagingName is the name of a staging directory of process id, without
// the random part MkdirTemp adds.
func StagingName(id proc.Identity) string {
	return fmt.Sprintf("%s%s-%s-%d-%d-", stagingPrefix, nameHash(id.Host), nameHash(bootAndNS(id)), id.PID, id.Start)
}

// bootAndNS is what the second hash of a staging name covers: the kernel
// boot and the pid namespace, which together say whether this process can
// look the owner's pid up.
func bootAndNS(id proc.Identity) string { return id.Boot + "\x00" + id.NS }

func nameHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// stagingOwner returns the identity of the process that made the staging
// directory name, as far as this process can tell it (host and boot are
// hashed in the name: they are known only when they are this process's),
// and false when name is not a staging directory's name.
func stagingOwner(name string) (proc.Identity, bool) {
	rest, ok := strings.CutPrefix(name, stagingPrefix)
	if !ok {
		return proc.Identity{}, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 5 || len(f[0]) != 16 || len(f[1]) != 16 || !isDigits(f[4]) || !isDigits(f[2]) || !isDigits(f[3]) {
		return proc.Identity{}, false
	}
	if _, err := hex.DecodeString(f[0] + f[1]); err != nil {
		return proc.Identity{}, false
	}
	pid, err := strconv.Atoi(f[2])
	if err != nil || pid <= 0 {
		return proc.Identity{}, false
	}
	start, err := strconv.ParseUint(f[3], 10, 64)
	if err != nil {
		return proc.Identity{}, false
	}
	me := proc.Self()
	id := proc.Identity{PID: pid, Start: start}
	if f[0] == nameHash(me.Host) {
		id.Host = me.Host // else "": another host, never provably gone
	}
	if f[1] == nameHash(bootAndNS(me)) {
		id.Boot, id.NS = me.Boot, me.NS // else "": never provably gone
	}
	return id, true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// removeStaleStaging removes from parent the staging directories of
// restores whose process is provably gone (proc.Check says Gone: same
// host, boot and pid namespace, and no such process, or a later process
// under the same pid) and whose lock it can take. A name that does not
// parse, a process that may be alive (Alive or Unknown), a directory whose
// lock is held and anything that is not a real directory (Lstat: a symlink
// is never followed) are left alone; os.RemoveAll does not follow symlinks
// inside the directory either. Failures are ignored: this is
// housekeeping, and the restore does not depend on it. Check does not look
// beside restore targets, so this is the only cleanup.
func removeStaleStaging(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		owner, ok := stagingOwner(e.Name())
		if !ok || proc.Check(owner) != proc.Gone {
			continue
		}
		p := filepath.Join(parent, e.Name())
		if st, err := os.Lstat(p); err != nil || !st.IsDir() {
			continue
		}
		f, err := vfs.OpenDir(p)
		if err != nil {
			continue
		}
		if ok, err := flock.TryLock(f, true); err == nil && ok {
			os.RemoveAll(p)
		}
		f.Close()
	}
}

// mkdirAllTracked is os.MkdirAll that returns the directories it created,
// deepest first, so a failed restore can remove them.
func mkdirAllTracked(fsys vfs.FS, dir string) ([]string, error) {
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		removeCreated(created) // those it made before failing
		return nil, err
	}
	return created, nil
}

func removeCreated(dirs []string) {
	for _, d := range dirs {
		os.Remove(d)
	}
}
