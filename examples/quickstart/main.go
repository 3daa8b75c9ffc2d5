// Command quickstart records a real directory as a chain of checkpoints in
// an sbxdb store, the way an agent host does after each run, and prints the
// thread's log.
//
//	go run ./examples/quickstart [-db DIR] [-thread T] [WORKSPACE]
//
// Each run takes the thread's writer lease, walks WORKSPACE (default ".",
// skipping .git, node_modules and .env*), hashes every regular file into its
// content-addressed key, and appends a checkpoint on the current head. The
// engine core stores manifests, chains, leases and reference counts; storing
// the blob bytes themselves (capture and restore) comes with the blob store.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	flag.Parse()
	workspace := "."
	if flag.NArg() > 0 {
		workspace = flag.Arg(0)
	}
	if err := run(context.Background(), *dir, *thread, workspace); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir, thread, workspace string) error {
	db, err := engine.Open(dir, nil)
	if err != nil {
		return err
	}
	defer db.Close()

	w, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		return err
	}
	defer w.Release(ctx)

	files, bytes, err := manifest(workspace, filepath.Clean(dir))
	if err != nil {
		return err
	}
	head, err := db.Head(ctx, thread)
	if err != nil {
		return err
	}
	now := time.Now()
	cp := &chain.Checkpoint{
		ID:        fmt.Sprintf("%s-%d", thread, now.UnixNano()),
		ThreadID:  thread,
		ParentID:  head,
		CreatedAt: now.UnixMilli(),
		Reason:    chain.ReasonAutomatic,
		Files:     files,
	}
	if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w.Writer}); err != nil {
		return err
	}
	fmt.Printf("appended %s: %d entries, %d bytes hashed, in %s\n", cp.ID, len(files), bytes, dir)

	list, err := db.List(ctx, thread)
	if err != nil {
		return err
	}
	refs, err := db.BlobReferences(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("thread %q: %d checkpoints, head %s; %d distinct blobs referenced\n", thread, len(list), cp.ID, len(refs))
	return nil
}

// manifest lists the regular files (with their sha256 keys), empty
// directories and symlinks under root, in path order, skipping the store
// itself.
func manifest(root, store string) ([]chain.Entry, int64, error) {
	var entries []chain.Entry
	var total int64
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		name := d.Name()
		if name == ".git" || name == "node_modules" || strings.HasPrefix(name, ".env") || filepath.Clean(path) == store {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			entries = append(entries, chain.Entry{Path: rel, Kind: chain.KindSymlink, Target: target})
		case d.IsDir():
			if empty, _ := isEmptyDir(path); empty {
				entries = append(entries, chain.Entry{Path: rel, Kind: chain.KindDir})
			}
		case info.Mode().IsRegular():
			key, n, err := hashFile(path)
			if err != nil {
				return err
			}
			total += n
			entries = append(entries, chain.Entry{Path: rel, Kind: chain.KindFile, BlobKey: key, Size: n,
				Executable: info.Mode()&0o111 != 0})
		}
		return nil
	})
	return entries, total, err
}

func isEmptyDir(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return err == io.EOF, nil
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return chain.FilePrefix + hex.EncodeToString(h.Sum(nil)), n, err
}
