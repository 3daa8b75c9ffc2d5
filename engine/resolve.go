package engine

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// MinRefPrefix is the shortest id prefix ResolveCheckpoint accepts, in
// bytes: shorter ones match too much to be meant.
const MinRefPrefix = 4

// maxAmbiguousShown bounds the candidates an AmbiguousRefError names.
const maxAmbiguousShown = 5

// maxRefSuffix is the longest thread suffix a reference can carry:
// "@~" and the 20 digits of the largest uint64.
const maxRefSuffix = len("@~") + 20

// ResolveCheckpoint returns the id of the checkpoint ref names, in one read
// transaction. In order:
//
//   - ref is a checkpoint id: that id, whatever ref looks like.
//   - ref is THREAD@ or THREAD@~N (N decimal digits, split at the last
//     "@", since ids and threads may contain "@"): the thread's head, or
//     its N-th ancestor along the parent chain (THREAD@~0 is the head).
//     The chain ends at a root, at a parent that is not stored (deleted
//     by retention) or at one of another thread. This form decides: a
//     thread without a head, or a chain shorter than N+1, is
//     CHECKPOINT_NOT_FOUND, not an id prefix.
//   - otherwise ref, of at least MinRefPrefix bytes, is a prefix of
//     exactly one checkpoint id: that id. A prefix of several ids is an
//     *AmbiguousRefError (ErrAmbiguousRef) naming some of them and how
//     many.
//
// A ref that is empty, not UTF-8, holds a NUL or is longer than an id
// with a thread suffix is SANDBOX_SNAPSHOT_INVALID_ID; a ref that names
// nothing is SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND (chain.ErrCheckpointNotFound)
// with a message saying why.
func (db *DB) ResolveCheckpoint(ctx context.Context, ref string) (string, error) {
	if err := firstErr(ctx.Err(), checkRef(ref)); err != nil {
		return "", err
	}
	var id string
	err := db.viewCtx(ctx, func(tx kv.Tx) (err error) {
		id, err = resolve(tx, ref)
		return err
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// checkRef refuses a ref no checkpoint or thread could be named by.
func checkRef(ref string) error {
	const field = "checkpoint reference"
	switch {
	case ref == "", !utf8.ValidString(ref), strings.IndexByte(ref, 0) >= 0:
		return chain.CheckID(field, ref)
	case len(ref) > chain.MaxIDBytes+maxRefSuffix:
		return chain.CheckID(field, ref) // too long: a *chain.LimitError
	}
	return nil
}

// threadRef splits ref of the form THREAD@ or THREAD@~N at its last "@".
// ok is false when ref has another form or THREAD is not a valid id; n
// is math.MaxUint64 for an N past it (no chain is that long).
func threadRef(ref string) (thread string, n uint64, ok bool) {
	at := strings.LastIndexByte(ref, '@')
	if at < 0 {
		return "", 0, false
	}
	thread, suffix := ref[:at], ref[at+1:]
	if chain.CheckID("threadId", thread) != nil {
		return "", 0, false
	}
	if suffix == "" {
		return thread, 0, true
	}
	digits, ok := strings.CutPrefix(suffix, "~")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		n = math.MaxUint64 // only a range error is left: all digits
	}
	return thread, n, true
}

// resolve is ResolveCheckpoint's transaction.
func resolve(tx kv.Tx, ref string) (string, error) {
	if len(ref) <= chain.MaxIDBytes && meta.CheckpointExists(tx, ref) {
		return ref, nil
	}
	if thread, n, ok := threadRef(ref); ok {
		return ancestor(tx, ref, thread, n)
	}
	if len(ref) < MinRefPrefix {
		return "", chain.Errorf(chain.ErrCheckpointNotFound, "no checkpoint %q (an id prefix needs at least %d bytes)", ref, MinRefPrefix)
	}
	found, count := meta.CheckpointsWithPrefix(tx, ref, maxAmbiguousShown)
	switch count {
	case 0:
		return "", chain.Errorf(chain.ErrCheckpointNotFound, "no checkpoint id is or starts with %q", ref)
	case 1:
		return found[0], nil
	}
	return "", &sbxdb.AmbiguousRefError{Ref: ref, Candidates: found, Count: count}
}

// ancestor returns the n-th checkpoint of the thread's chain from its
// head (0: the head).
func ancestor(tx kv.Tx, ref, thread string, n uint64) (string, error) {
	id, err := meta.Head(tx, thread)
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", chain.Errorf(chain.ErrCheckpointNotFound, "%q: thread %q has no head checkpoint", ref, thread)
	}
	seen := map[string]struct{}{}
	for steps := uint64(0); ; steps++ {
		t, parent, ok, err := meta.CheckpointHeader(tx, id)
		switch {
		case err != nil:
			return "", err
		case !ok || t != thread:
			// A head names a stored checkpoint of its own thread (and
			// the walk checks each parent before stepping to it).
			return "", fmt.Errorf("%w: head of thread %q names checkpoint %q, stored: %v, of thread %q", chain.ErrCorrupt, thread, id, ok, t)
		}
		if _, dup := seen[id]; dup {
			return "", fmt.Errorf("%w: the parent chain of thread %q loops back to checkpoint %q", chain.ErrCorrupt, thread, id)
		}
		seen[id] = struct{}{}
		if steps == n {
			return id, nil
		}
		end := ""
		if parent == "" {
			end = fmt.Sprintf("%q is its root", id)
		} else {
			pt, _, pok, err := meta.CheckpointHeader(tx, parent)
			switch {
			case err != nil:
				return "", err
			case !pok:
				end = fmt.Sprintf("the parent of %q, %q, was deleted", id, parent)
			case pt != thread:
				end = fmt.Sprintf("the parent of %q, %q, was deleted (the id now names a checkpoint of thread %q)", id, parent, pt)
			}
		}
		if end != "" {
			return "", chain.Errorf(chain.ErrCheckpointNotFound, "%q: the chain of thread %q from its head has %d %s (%s@~0 to %s@~%d): %s",
				ref, thread, steps+1, plural(steps+1, "checkpoint"), thread, thread, steps, end)
		}
		id = parent
	}
}

// plural returns noun, with an s unless n is 1.
func plural(n uint64, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}
