package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
)

// maxPathRunes is the longest path an error message shows whole; a longer
// one is shortened in the middle (shortenPath).
const maxPathRunes = 200

// shortenPath returns p when it has at most max runes, else its start and
// its end around "…", max runes in all: about a third from the start, the
// rest from the end, each cut at a slash when one is near, as in
// "/very/long/…/tail/file.txt". It cuts between runes, so the result is
// valid UTF-8 when p is.
func shortenPath(p string, max int) string {
	n := utf8.RuneCountInString(p)
	if n <= max || max < 3 {
		return p
	}
	headRunes := max / 3
	tailRunes := max - headRunes - 1
	head := p[:runeOffset(p, headRunes)]
	tail := p[runeOffset(p, n-tailRunes):]
	if i := strings.LastIndexByte(head, '/'); i >= len(head)/2 {
		head = head[:i+1]
	}
	if j := strings.IndexByte(tail, '/'); j >= 0 && j <= len(tail)/2 {
		tail = tail[j:]
	}
	return head + "…" + tail
}

// runeOffset returns the byte offset of the n-th rune of s.
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// shortenPaths shortens every path in msg longer than maxPathRunes: every
// run of non-blank characters that holds a slash. A path with blanks in it
// is several such runs, each shortened only when it is that long itself.
func shortenPaths(msg string) string {
	if len(msg) <= maxPathRunes {
		return msg
	}
	fields := strings.Split(msg, " ")
	for i, f := range fields {
		if strings.ContainsRune(f, '/') {
			fields[i] = shortenPath(f, maxPathRunes)
		}
	}
	return strings.Join(fields, " ")
}

// storeName names where the store directory came from, for a message
// about it: "--db DIR", "$SBXDB_DIR (DIR)" or the default's name.
func storeName(inv *invocation) string {
	switch {
	case !inv.dirGiven:
		return inv.dir
	case os.Getenv(dirEnv) == inv.dir:
		return "$" + dirEnv + " (" + inv.dir + ")"
	}
	return "--db " + inv.dir
}

// notADirectory returns the error of a store path that names something
// other than a directory, or nil when it names a directory or nothing.
func notADirectory(inv *invocation) error {
	fi, err := os.Stat(inv.dir)
	switch {
	case err != nil || fi.IsDir():
		return nil
	case fi.Mode().IsRegular():
		return reword(sbxdb.ErrNoStore, "%s is a regular file, not a store directory", storeName(inv))
	}
	return reword(sbxdb.ErrNoStore, "%s is not a directory", storeName(inv))
}

// needStore returns nil when the store's database file exists, else the
// error of a command that needs an existing store (it creates none): no
// store, the store path not being a directory, or why the file could not
// be looked at.
func needStore(inv *invocation) error {
	if inv.metadata != "" {
		return nil // the database says, at Open
	}
	if shared := engine.SharedMetadataOf(inv.dir); shared != nil {
		return sharedDirError(shared)
	}
	_, err := os.Stat(filepath.Join(inv.dir, engine.DBFile))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return openError(inv, sbxdb.ErrNoStore)
	}
	return openError(inv, err)
}

// sharedDirError is the usage error of a command given, without
// --metadata, the directory of a store whose metadata is in a database
// (engine.SharedDirError): it names the flags to add and their values as
// the directory records them (the password is never recorded).
func sharedDirError(err error) error {
	e, _ := errors.AsType[*engine.SharedDirError](err)
	flags := "--metadata " + e.Metadata
	if e.Blobs != "" {
		flags += " --blobs " + e.Blobs
	}
	return &usageError{err: reword(e, "%s is the directory of a store whose metadata is in a database: add %s (with the password, if the database needs one)", e.Dir, flags)}
}

// isSharedDir says whether err is an engine.SharedDirError.
func isSharedDir(err error) bool {
	_, ok := errors.AsType[*engine.SharedDirError](err)
	return ok
}
