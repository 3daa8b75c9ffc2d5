package vfs

import "testing"

// forEachOpenMode runs fn with openat2 and then with the component-wise
// fallback used where openat2 is missing or filtered.
func forEachOpenMode(t *testing.T, fn func(t *testing.T)) {
	t.Run("openat2", fn)
	t.Run("components", func(t *testing.T) {
		was := noOpenat2.Load()
		noOpenat2.Store(true)
		defer noOpenat2.Store(was)
		fn(t)
	})
}
