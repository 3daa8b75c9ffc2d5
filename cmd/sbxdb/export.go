package main

import (
	"archive/tar"
	"archive/zip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/spf13/pflag"
)

var exportCmd = register(&command{
	name:       "export",
	group:      groupWorkspace,
	args:       "CHECKPOINT",
	nargs:      1,
	noJSON:     true,
	flagsUsage: "[-o FILE] [--format tar|zip]",
	summary:    "Write a checkpoint's tree as a tar or zip archive",
	detail: `Writes the checkpoint's files, directories and symlinks as an archive, on
standard output or into FILE (-o), like restic dump and borg export-tar:
each directory before what it holds, in path byte order; files with mode
0644, or 0755 when executable; symlinks with their targets; every entry
dated at the checkpoint's creation, owned by uid and gid 0, so the same
checkpoint always gives the same archive. --format is tar (the default, or
when FILE ends in .tar) or zip (the default when FILE ends in .zip).

The bytes are checked against each blob key as they are written. With -o
the archive is written beside FILE and renamed over it once complete, so
FILE is never left half written; on standard output a failure means what
was written must be discarded, as for cat. A missing or damaged blob is
SANDBOX_SNAPSHOT_MISSING_BLOB or SANDBOX_SNAPSHOT_INVALID_BLOB naming the
path and the key (exit 12).

` + checkpointHelp + `

` + viaServer,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		fset.StringVarP(&inv.outFile, "output", "o", "", "write the archive to `FILE` instead of standard output")
		fset.StringVar(&inv.format, "format", "", "archive `FORMAT`: tar or zip (default from FILE's extension, else tar)")
	},
	check: func(inv *invocation, args []string) error {
		switch inv.format {
		case "":
			inv.format = "tar"
			if strings.HasSuffix(strings.ToLower(inv.outFile), ".zip") {
				inv.format = "zip"
			}
		case "tar", "zip":
		default:
			return fmt.Errorf("--format %q: want tar or zip", inv.format)
		}
		return checkCount(args, 1, "CHECKPOINT")
	},
	run: runExport,
})

func runExport(inv *invocation, args []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	cp, err := getCheckpoint(inv, db, args[0])
	if err != nil {
		return err
	}
	if inv.outFile == "" {
		return writeArchive(inv, db, cp, inv.out)
	}
	// Beside FILE, then renamed over it: FILE is the whole archive or
	// what it was before.
	f, err := os.CreateTemp(filepath.Dir(inv.outFile), "."+filepath.Base(inv.outFile)+".*.partial")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = writeArchive(inv, db, cp, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, inv.outFile)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// archiveWriter is what writeArchive needs of tar and zip.
type archiveWriter interface {
	dir(name string, mtime time.Time) error
	file(name string, size int64, exec bool, mtime time.Time) (io.Writer, error)
	symlink(name, target string, mtime time.Time) error
	Close() error
}

// writeArchive writes cp's tree to w in inv.format: each directory, the
// recorded empty ones and those that hold entries, before its entries.
func writeArchive(inv *invocation, db store, cp *chain.Checkpoint, w io.Writer) error {
	var aw archiveWriter
	if inv.format == "zip" {
		aw = zipArchive{zip.NewWriter(w)}
	} else {
		aw = tarArchive{tar.NewWriter(w)}
	}
	mtime := time.UnixMilli(cp.CreatedAt).UTC()
	for _, e := range lsEntries(cp.Files, ".") {
		var err error
		switch e.Kind {
		case chain.KindDir:
			err = aw.dir(e.Path+"/", mtime)
		case chain.KindSymlink:
			err = aw.symlink(e.Path, e.Target, mtime)
		case chain.KindFile:
			err = exportFile(inv, db, aw, &e.Entry, mtime)
		default:
			err = fmt.Errorf("%s: an entry of kind %q cannot be archived", cell(e.Path), cell(string(e.Kind)))
		}
		if err != nil {
			return err
		}
	}
	return aw.Close()
}

// exportFile writes one file entry, its bytes verified as they are read.
func exportFile(inv *invocation, db store, aw archiveWriter, e *chain.Entry, mtime time.Time) error {
	r, err := db.OpenEntry(inv.ctx, e)
	if err != nil {
		return err // names the path and the key
	}
	defer r.Close()
	fw, err := aw.file(e.Path, e.Size, e.Executable, mtime)
	if err != nil {
		return err
	}
	n, err := io.Copy(fw, r)
	switch {
	case err != nil:
		return err
	case n != e.Size: // a reader that verifies its size never gets here
		return chain.Errorf(chain.ErrInvalidBlob, "%q: %d bytes read, the manifest says %d", e.Path, n, e.Size)
	}
	return nil
}

type tarArchive struct{ w *tar.Writer }

func (a tarArchive) dir(name string, mtime time.Time) error {
	return a.w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX})
}

func (a tarArchive) file(name string, size int64, exec bool, mtime time.Time) (io.Writer, error) {
	mode := int64(0o644)
	if exec {
		mode = 0o755
	}
	err := a.w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: mode, ModTime: mtime, Format: tar.FormatPAX})
	return a.w, err
}

func (a tarArchive) symlink(name, target string, mtime time.Time) error {
	return a.w.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: mtime, Format: tar.FormatPAX})
}

func (a tarArchive) Close() error { return a.w.Close() }

type zipArchive struct{ w *zip.Writer }

func (a zipArchive) header(name string, mode fs.FileMode, mtime time.Time, method uint16) (io.Writer, error) {
	h := &zip.FileHeader{Name: name, Method: method, Modified: mtime}
	h.SetMode(mode)
	return a.w.CreateHeader(h)
}

func (a zipArchive) dir(name string, mtime time.Time) error {
	_, err := a.header(name, fs.ModeDir|0o755, mtime, zip.Store)
	return err
}

func (a zipArchive) file(name string, _ int64, exec bool, mtime time.Time) (io.Writer, error) {
	mode := fs.FileMode(0o644)
	if exec {
		mode = 0o755
	}
	return a.header(name, mode, mtime, zip.Deflate)
}

func (a zipArchive) symlink(name, target string, mtime time.Time) error {
	w, err := a.header(name, fs.ModeSymlink|0o777, mtime, zip.Store)
	if err == nil {
		_, err = io.WriteString(w, target) // a zip symlink's content is its target
	}
	return err
}

func (a zipArchive) Close() error { return a.w.Close() }
