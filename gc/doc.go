// Package gc is sbxdb's garbage collector as a small algorithm over small
// interfaces: retention (keep the newest N checkpoints of a thread, under its
// writer lease) and the mark-and-sweep of blobs no checkpoint uses, with the
// olderThan window (SPEC §5).
//
// It knows no bbolt: the engine wires it to its own store (and adds pins and a
// per-key re-check, which close the race between a sweep and a capture that
// re-uses an old blob); the interfaces let it run over any blob backend, such
// as an object bucket next to any checkpoint store.
package gc
