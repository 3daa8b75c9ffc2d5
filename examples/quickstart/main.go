// Command quickstart is sbxdb's main job on defaults: it captures a real
// directory as a checkpoint in an embedded store, the way an agent host does
// after each run, then restores that checkpoint into a new, empty directory
// and checks that the copy is byte-exact.
//
//	go run ./examples/quickstart [-db DIR] [-thread T] [-out DIR] [WORKSPACE]
//
// WORKSPACE defaults to "." and the store to $SBXDB_DIR or ./.sbxdb (never
// captured itself). The default policy skips .git, node_modules and .env*.
// Each run appends one checkpoint on the thread's head, so running it twice
// makes a chain; the second run reads only the files that changed.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

func main() {
	defDir := os.Getenv("SBXDB_DIR")
	if defDir == "" {
		defDir = ".sbxdb"
	}
	dir := flag.String("db", defDir, "store directory ($SBXDB_DIR, default .sbxdb)")
	thread := flag.String("thread", "quickstart", "thread to append to")
	out := flag.String("out", "", "restore into this new directory (default: a new temporary directory, removed after the check)")
	flag.Parse()
	workspace := "."
	if flag.NArg() > 0 {
		workspace = flag.Arg(0)
	}
	if err := run(context.Background(), os.Stdout, *dir, *thread, workspace, *out); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run captures workspace on thread in the store dir, restores the
// checkpoint into out (a temporary directory when ""), checks the copy,
// and reports each step on w.
func run(ctx context.Context, w io.Writer, dir, thread, workspace, out string) error {
	db, err := engine.Open(dir, nil)
	if err != nil {
		return err
	}
	defer db.Close()

	lease, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		return err
	}
	res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: lease.Writer, Dir: workspace})
	if rerr := lease.Release(ctx); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	s := res.Stats
	fmt.Fprintf(w, "captured %s: %s (%.1f MB), %s, %s; %d unchanged, %d read, %s (%.1f MB stored)\n",
		res.Checkpoint.ID, count(s.Files, "file"), float64(s.Bytes)/1e6, count(s.Dirs, "empty dir"), count(s.Symlinks, "symlink"),
		s.Unchanged, s.FilesRead, count(s.BlobsNew, "new blob"), float64(s.BytesNew)/1e6)

	where := out
	if out == "" {
		where = "a temporary directory (removed again; -out DIR keeps the copy)"
		tmp, err := os.MkdirTemp("", "sbxdb-quickstart-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		out = filepath.Join(tmp, "restored")
	}
	rs, err := db.Restore(ctx, res.Checkpoint.ID, out, nil)
	if err != nil {
		return err
	}
	if err := verify(res.Checkpoint, out); err != nil {
		return fmt.Errorf("restored copy differs: %w", err)
	}
	fmt.Fprintf(w, "restored into %s: %s (%.1f MB), byte-exact\n", where, count(rs.Files, "file"), float64(rs.Bytes)/1e6)

	list, err := db.List(ctx, thread)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "thread %s: %s in %s\n", thread, count(len(list), "checkpoint"), dir)
	return nil
}

// count renders n things, as in "1 checkpoint" or "3 checkpoints".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// verify re-reads the restored tree and compares it with the manifest.
func verify(cp *chain.Checkpoint, root string) error {
	for _, e := range cp.Files {
		p := filepath.Join(root, filepath.FromSlash(e.Path))
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch e.Kind {
		case chain.KindFile:
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			n, err := io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			if n != e.Size || fmt.Sprintf("%s%x", chain.FilePrefix, h.Sum(nil)) != e.BlobKey {
				return fmt.Errorf("%s: content differs", e.Path)
			}
			if (st.Mode()&0o111 != 0) != e.Executable {
				return fmt.Errorf("%s: executable bit differs", e.Path)
			}
		case chain.KindSymlink:
			if t, err := os.Readlink(p); err != nil || t != e.Target {
				return fmt.Errorf("%s: symlink target differs", e.Path)
			}
		case chain.KindDir:
			if !st.IsDir() {
				return fmt.Errorf("%s: not a directory", e.Path)
			}
		}
	}
	return nil
}
