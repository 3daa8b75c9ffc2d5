package cas

import (
	"testing"
	"time"
)

// Two deleters can hold one key dying at once: a sweep that has unindexed a
// large blob and not yet removed its file, and RemoveOrphans, which finds
// that file unindexed meanwhile. The key must stay dying until both are
// done; if the first to finish cleared the mark, a batch could store the
// key again and the other's late removal would take the new file.
func TestDyingMarksAreCounted(t *testing.T) {
	var p pinSet
	p.cond.L = &p.mu
	if !p.markDying("k") || !p.markDying("k") {
		t.Fatal("markDying of an unpinned key refused")
	}
	p.unmarkDying([]string{"k"}) // the first deleter is done
	pinned := make(chan struct{})
	go func() { p.pin([]string{"k"}); close(pinned) }()
	select {
	case <-pinned:
		t.Fatal("a batch pinned a key another deleter still holds dying")
	case <-time.After(50 * time.Millisecond): // still waiting, as it must
	}
	p.unmarkDying([]string{"k"}) // the second is done
	<-pinned
	if p.markDying("k") {
		t.Error("markDying of a pinned key succeeded")
	}
}
