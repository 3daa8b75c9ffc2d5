package engine_test

import (
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/internal/testkit"
)

// soakDefault is how long TestSoak runs unless SBXDB_SOAK says: 3 s, and
// 60 s under SBXDB_LONG=1.
func soakDefault(t *testing.T) time.Duration {
	return testkit.Scale(t, 3*time.Second, 60*time.Second)
}
