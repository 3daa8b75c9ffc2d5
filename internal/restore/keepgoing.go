package restore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/progress"
)

// keyError is an error of writeFiles that a blob caused: key is the
// blob's. Its message and its chain of errors are err's.
type keyError struct {
	key string
	err error
}

func (e *keyError) Error() string { return e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// blobFault reports whether err says a blob is missing or damaged: the
// only errors RestoreOptions.KeepGoing passes over.
func blobFault(err error) bool {
	switch chain.Code(err) {
	case chain.CodeMissingBlob, chain.CodeInvalidBlob:
		return true
	}
	return false
}

// writeKeepGoing writes files as writeFiles does. Without keepGoing any
// error stops all. With it, a blob that is missing or damaged has its
// files removed from root (a damaged blob is found as its file is written,
// so its file may be half written), named in the result, and the writing
// resumes with the blobs not yet written; any other error still stops
// all. Each blob passed over costs one more pass, which reads only the
// blobs left.
func (rs *restorer) writeKeepGoing(ctx context.Context, root string, files []*chain.Entry, prog *progress.Counters, dirsMade func() error, keepGoing bool) ([]sbxdb.SkippedFile, error) {
	written := map[string]bool{} // keys whose files are all written; set from ReadEach's workers
	var mu sync.Mutex
	done := func(key string) { mu.Lock(); written[key] = true; mu.Unlock() }
	var skipped []sbxdb.SkippedFile
	left := files
	for {
		err := rs.writeFiles(ctx, root, left, prog, dirsMade, done)
		ke, ok := errors.AsType[*keyError](err)
		if err == nil || !keepGoing || !ok || !blobFault(err) || ctx.Err() != nil {
			slices.SortFunc(skipped, func(a, b sbxdb.SkippedFile) int { return strings.Compare(a.Path, b.Path) })
			return skipped, err
		}
		mu.Lock()
		next := left[:0:0]
		for _, e := range left {
			switch {
			case e.BlobKey == ke.key:
				os.Remove(filepath.Join(root, filepath.FromSlash(e.Path)))
				code := chain.Code(err)
				skipped = append(skipped, sbxdb.SkippedFile{Path: e.Path, Code: code, Reason: strings.TrimPrefix(err.Error(), code+": ")})
				prog.TotalFiles.Add(-1)
				prog.TotalBytes.Add(-e.Size)
			case !written[e.BlobKey]:
				next = append(next, e)
			}
		}
		mu.Unlock()
		// A blob being written when another failed may have left its
		// files half written: they are written again.
		for _, e := range next {
			os.Remove(filepath.Join(root, filepath.FromSlash(e.Path)))
		}
		left = next
	}
}
