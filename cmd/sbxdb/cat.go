package main

import (
	"fmt"
	"io"
	"path"

	"github.com/sbxdb/sbxdb/chain"
)

var catCmd = register(&command{
	name:    "cat",
	group:   groupInspect,
	args:    "CHECKPOINT PATH",
	nargs:   2,
	noJSON:  true,
	summary: "Write one file of a checkpoint to standard output",
	detail: `PATH is the file's path in the checkpoint, relative to the workspace root
with / separators ("src/main.go"), as show lists it. The bytes are checked
against the blob key as they are streamed; a large blob is only known to be
good when its end is reached, so some bytes may have been written before
the damage is found. A non-zero exit status therefore means the output
must be discarded. A missing blob is SANDBOX_SNAPSHOT_MISSING_BLOB and a
damaged one SANDBOX_SNAPSHOT_INVALID_BLOB, naming the path and the key.
Bytes that capture zero-filled for --secret-env are zeros here too.

` + checkpointHelp + `

While sbxdb serve runs for the store, cat works through it (sbxdb help says
how the server is found): the bytes come from the server, which verifies
them, and are checked here against the entry's size and key as well.`,
	run: runCat,
})

func runCat(inv *invocation, args []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	cp, err := getCheckpoint(inv, db, args[0])
	if err != nil {
		return err
	}
	p := path.Clean(args[1])
	var e *chain.Entry
	for i := range cp.Files {
		if cp.Files[i].Path == p {
			e = &cp.Files[i]
			break
		}
	}
	switch {
	case e == nil:
		return fmt.Errorf("%s is not in checkpoint %s", cell(args[1]), cell(cp.ID))
	case e.Kind == chain.KindDir:
		return fmt.Errorf("%s is a directory in checkpoint %s, not a file", cell(p), cell(cp.ID))
	case e.Kind != chain.KindFile:
		return fmt.Errorf("%s is a %s in checkpoint %s, not a file", cell(p), cell(string(e.Kind)), cell(cp.ID))
	}

	r, err := db.OpenEntry(inv.ctx, e)
	if err != nil {
		return err // names the path and the key
	}
	defer r.Close()
	buf := make([]byte, 256<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := inv.out.Write(buf[:n]); err != nil {
				return fmt.Errorf("writing %s: %w", cell(p), err)
			}
		}
		if rerr == io.EOF {
			return nil // verified
		}
		if rerr != nil {
			return rerr
		}
	}
}
