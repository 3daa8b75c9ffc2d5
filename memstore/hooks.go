package memstore

import "fmt"

// hook is one registered test hook. It is a pointer so that removing a hook
// removes that registration only, not a later one for the same point.
type hook struct{ fn func() error }

// knownPoints are the points a hook may be registered at (the OnPoint points
// of storetest.Subject).
//
//   - "fork.preflight" runs after the fork's input checks and before the
//     store lock is taken; its function may call the store.
//   - The ".publish" points run with the store lock held, after all checks
//     and before the first mutation; their functions must not call the store
//     (it would deadlock). An error fails the write, which then changes
//     nothing.
var knownPoints = map[string]bool{
	"fork.preflight":            true,
	"append.publish":            true,
	"fork.publish":              true,
	"deleteHead.publish":        true,
	"deleteCheckpoints.publish": true,
}

// onPoint registers fn at point and returns a function removing it. A later
// registration at the same point replaces an earlier one. It panics on an
// unknown point, which is a bug in the test calling it.
func (s *Store) onPoint(point string, fn func() error) (remove func()) {
	if !knownPoints[point] {
		panic(fmt.Sprintf("memstore: unknown hook point %q", point))
	}
	h := &hook{fn: fn}
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	if s.points == nil {
		s.points = map[string]*hook{}
	}
	s.points[point] = h
	return func() {
		s.hookMu.Lock()
		defer s.hookMu.Unlock()
		if s.points[point] == h {
			delete(s.points, point)
		}
	}
}

// runPoint runs the hook registered at point, if any, and returns its error.
// hookMu is released before the hook runs, so the hook may register or
// remove hooks, and a preflight hook may call the store.
func (s *Store) runPoint(point string) error {
	s.hookMu.Lock()
	h := s.points[point]
	s.hookMu.Unlock()
	if h == nil {
		return nil
	}
	return h.fn()
}
