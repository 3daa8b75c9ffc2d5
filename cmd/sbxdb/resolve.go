package main

import "github.com/sbxdb/sbxdb/chain"

// checkpointHelp is the help paragraph of every command that takes a
// CHECKPOINT argument: what one may be.
const checkpointHelp = `A CHECKPOINT is a checkpoint id; a prefix of one, at least 4 characters
long, that no other id starts with; THREAD@, the thread's head; or
THREAD@~N, the N-th checkpoint back from the head along the parent chain
(THREAD@~1 is the head's parent). An exact id always wins. A prefix that
several ids start with is an error naming some of them.`

// resolveCheckpoint returns the id of the checkpoint ref names
// (checkpointHelp). A ref that names none is
// SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND saying why, and a prefix of
// several ids matches sbxdb.ErrAmbiguousRef, naming candidates: both
// exit status 1.
func resolveCheckpoint(inv *invocation, db store, ref string) (string, error) {
	return db.ResolveCheckpoint(inv.ctx, ref)
}

// getCheckpoint returns the checkpoint ref names (resolveCheckpoint).
func getCheckpoint(inv *invocation, db store, ref string) (*chain.Checkpoint, error) {
	id, err := resolveCheckpoint(inv, db, ref)
	if err != nil {
		return nil, err
	}
	cp, err := db.Get(inv.ctx, id)
	if err != nil {
		return nil, err
	}
	if cp == nil { // deleted since it was resolved
		return nil, chain.Errorf(chain.ErrCheckpointNotFound, "checkpoint %q not found", id)
	}
	return cp, nil
}
