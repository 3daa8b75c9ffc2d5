package ui

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb/chain"
)

// maxViewBytes is the most of a file the viewer shows; the rest is
// offered for download.
const maxViewBytes = 1 << 20

// treeRow is one row of a directory listing.
type treeRow struct {
	Name, Path string
	Kind       chain.Kind // file, dir or symlink
	Size       int64      // a file's bytes; a directory's files' bytes
	Files      int        // a directory's files
	Mode       string
	Target     string
}

// checkpointData is the checkpoint page.
type checkpointData struct {
	CP        *chain.Checkpoint
	Dir       string
	Crumbs    []crumb
	Rows      []treeRow
	TotalSize int64
	Messages  []message
}

type crumb struct{ Name, Path string }

// getCheckpoint reads ?id (or the name given), answering 404 when unknown.
func (u *UI) getCheckpoint(w http.ResponseWriter, r *http.Request, param string) *chain.Checkpoint {
	id := r.URL.Query().Get(param)
	if err := chain.CheckID(param, id); err != nil {
		u.failErr(w, r, err)
		return nil
	}
	cp, err := u.db.Get(r.Context(), id)
	if err != nil {
		u.failErr(w, r, err)
		return nil
	}
	if cp == nil {
		u.fail(w, r, http.StatusNotFound, "There is no checkpoint "+id+".")
	}
	return cp
}

// checkpoint shows ?id: its metadata, the directory ?dir of its tree,
// its artifacts and its transcript.
func (u *UI) checkpoint(w http.ResponseWriter, r *http.Request) {
	cp := u.getCheckpoint(w, r, "id")
	if cp == nil {
		return
	}
	dir := strings.Trim(r.URL.Query().Get("dir"), "/")
	d := checkpointData{CP: cp, Dir: dir, Rows: listDir(cp.Files, dir), Messages: messages(cp.Conversation)}
	for _, e := range cp.Files {
		d.TotalSize += e.Size
	}
	if dir != "" {
		parts := strings.Split(dir, "/")
		for i := range parts {
			d.Crumbs = append(d.Crumbs, crumb{parts[i], strings.Join(parts[:i+1], "/")})
		}
	}
	u.render(w, r, http.StatusOK, "checkpoint", "Checkpoint "+cp.ID, "threads", d)
}

// listDir is the entries directly under dir ("" is the root): the
// manifest's files, symlinks and empty directories, and the directories
// its deeper paths imply, directories first, then by name.
func listDir(files []chain.Entry, dir string) []treeRow {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	dirs := map[string]*treeRow{}
	var rows []treeRow
	for _, e := range files {
		rest, ok := strings.CutPrefix(e.Path, prefix)
		if !ok || rest == "" {
			continue
		}
		if name, _, deeper := strings.Cut(rest, "/"); deeper || e.Kind == chain.KindDir {
			d := dirs[name]
			if d == nil {
				d = &treeRow{Name: name, Path: prefix + name, Kind: chain.KindDir, Mode: "drwxr-xr-x"}
				dirs[name] = d
			}
			if e.Kind == chain.KindFile {
				d.Files++
				d.Size += e.Size
			}
			continue
		}
		row := treeRow{Name: rest, Path: e.Path, Kind: e.Kind, Size: e.Size, Target: e.Target}
		switch {
		case e.Kind == chain.KindSymlink:
			row.Mode = "lrwxrwxrwx"
		case e.Executable:
			row.Mode = "-rwxr-xr-x"
		default:
			row.Mode = "-rw-r--r--"
		}
		rows = append(rows, row)
	}
	var out []treeRow
	for _, d := range dirs {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b treeRow) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(rows, func(a, b treeRow) int { return strings.Compare(a.Name, b.Name) })
	return append(out, rows...)
}

// entry finds the manifest entry of ?path in cp, answering 404 when none.
func (u *UI) entry(w http.ResponseWriter, r *http.Request, cp *chain.Checkpoint) *chain.Entry {
	p := r.URL.Query().Get("path")
	for i := range cp.Files {
		if cp.Files[i].Path == p {
			return &cp.Files[i]
		}
	}
	u.fail(w, r, http.StatusNotFound, "The checkpoint "+cp.ID+" has no entry "+p+".")
	return nil
}

// fileData is the file viewer.
type fileData struct {
	CP      *chain.Checkpoint
	E       *chain.Entry
	Crumbs  []crumb
	Lines   []string // the text, when it is shown
	Binary  bool
	Cut     bool // only the first maxViewBytes are shown
	Problem string
}

// file shows ?path of checkpoint ?cp: a text file's lines numbered (its
// first maxViewBytes), a binary one offered for download, a symlink's
// target.
func (u *UI) file(w http.ResponseWriter, r *http.Request) {
	cp := u.getCheckpoint(w, r, "cp")
	if cp == nil {
		return
	}
	e := u.entry(w, r, cp)
	if e == nil {
		return
	}
	d := fileData{CP: cp, E: e}
	parts := strings.Split(e.Path, "/")
	for i := range parts[:len(parts)-1] {
		d.Crumbs = append(d.Crumbs, crumb{parts[i], strings.Join(parts[:i+1], "/")})
	}
	if e.Kind == chain.KindFile {
		b, err := u.readHead(r, e, maxViewBytes)
		switch {
		case err != nil:
			d.Problem = err.Error()
		case !isText(b):
			d.Binary = true
		default:
			d.Cut = e.Size > int64(len(b))
			if d.Cut { // a cut may split a character or a line
				b = bytes.ToValidUTF8(b[:bytes.LastIndexByte(b, '\n')+1], nil)
			}
			d.Lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		}
	}
	u.render(w, r, http.StatusOK, "file", e.Path+" · "+cp.ID, "threads", d)
}

// readHead reads the first n bytes of e.
func (u *UI) readHead(r *http.Request, e *chain.Entry, n int64) ([]byte, error) {
	rc, err := u.db.OpenEntry(r.Context(), e)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, n))
}

// isText reports whether b looks like text: UTF-8 (a cut last character
// allowed) without NUL bytes.
func isText(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return false
	}
	if utf8.Valid(b) {
		return true
	}
	for i := 1; i < utf8.UTFMax && i < len(b); i++ { // a character cut at the end
		if utf8.Valid(b[:len(b)-i]) {
			return true
		}
	}
	return false
}

// raw sends the bytes of file ?path of checkpoint ?cp as a download,
// streamed, honouring a single byte Range. Its bytes are verified against
// their key as a whole download reads them (engine.DB.OpenEntry); a range
// is not.
func (u *UI) raw(w http.ResponseWriter, r *http.Request) {
	cp := u.getCheckpoint(w, r, "cp")
	if cp == nil {
		return
	}
	e := u.entry(w, r, cp)
	if e == nil {
		return
	}
	if e.Kind != chain.KindFile {
		u.fail(w, r, http.StatusBadRequest, e.Path+" is a "+string(e.Kind)+", not a file.")
		return
	}
	rc, err := u.db.OpenEntry(r.Context(), e)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	defer rc.Close()
	download(w, r, rc, e.Size, path.Base(e.Path))
}

// artifact sends artifact ?id of checkpoint ?cp as a download, whatever
// media type the record names: stored bytes are never rendered.
func (u *UI) artifact(w http.ResponseWriter, r *http.Request) {
	cp := u.getCheckpoint(w, r, "cp")
	if cp == nil {
		return
	}
	id := r.URL.Query().Get("id")
	for _, a := range cp.Artifacts {
		if a.ArtifactID != id {
			continue
		}
		rc, err := u.db.Blobs().Open(r.Context(), a.BlobKey)
		if err != nil {
			u.failErr(w, r, err)
			return
		}
		defer rc.Close()
		if rc.Size() != a.Size {
			u.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("The artifact's blob has %d bytes; its record says %d.", rc.Size(), a.Size))
			return
		}
		download(w, r, rc, a.Size, a.Name)
		return
	}
	u.fail(w, r, http.StatusNotFound, "The checkpoint "+cp.ID+" has no artifact "+id+".")
}

// download streams size bytes of rc as an attachment named name, or the
// single range r asks for (206; 416 when it is unsatisfiable). Bytes
// before the range are read and dropped: blobs are compressed, so there
// is nothing to seek.
func download(w http.ResponseWriter, r *http.Request, rc io.Reader, size int64, name string) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	start, n := int64(0), size
	if spec := r.Header.Get("Range"); spec != "" {
		var ok bool
		if start, n, ok = parseRange(spec, size); !ok {
			h.Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
			http.Error(w, "unsatisfiable range", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, start+n-1, size))
	}
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	status := http.StatusOK
	if n != size || start != 0 {
		status = http.StatusPartialContent
	}
	if _, err := io.CopyN(io.Discard, rc, start); err != nil {
		http.Error(w, "reading the blob failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.CopyN(w, rc, n); err != nil && !errors.Is(err, io.EOF) {
		panic(http.ErrAbortHandler) // the status line is sent: cut the response short
	}
	if n == size { // the whole blob: reading to its end verifies it
		if _, err := io.Copy(io.Discard, rc); err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// parseRange parses one range "bytes=a-b", "bytes=a-" or "bytes=-n" of a
// body of size bytes, returning its start and length.
func parseRange(spec string, size int64) (start, n int64, ok bool) {
	s, found := strings.CutPrefix(spec, "bytes=")
	if !found || strings.Contains(s, ",") {
		return 0, 0, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(s), "-")
	if !found {
		return 0, 0, false
	}
	if a == "" {
		m, err := strconv.ParseInt(b, 10, 64)
		if err != nil || m <= 0 || size == 0 {
			return 0, 0, false
		}
		m = min(m, size)
		return size - m, m, true
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 || first >= size {
		return 0, 0, false
	}
	last := size - 1
	if b != "" {
		if last, err = strconv.ParseInt(b, 10, 64); err != nil || last < first {
			return 0, 0, false
		}
		last = min(last, size-1)
	}
	return first, last - first + 1, true
}

// copyAll copies r to w to its end (which verifies a blob's bytes).
func copyAll(w io.Writer, r io.Reader) (int64, error) { return io.Copy(w, r) }
