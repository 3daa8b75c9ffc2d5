package restore

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"
)

// unpinError names the directories of an error by their paths, not their
// descriptors, and only the descriptor given; errors.Is still sees the
// cause.
func TestUnpinError(t *testing.T) {
	cause := &fs.PathError{Op: "mkdir", Path: "/proc/self/fd/7/src", Err: syscall.ENOSPC}
	for _, c := range []struct {
		err  error
		want string
	}{
		{cause, "mkdir /w/.stage/src: no space left on device"},
		{&fs.PathError{Op: "rename", Path: "/proc/self/fd/7 /proc/self/fd/71/a", Err: syscall.EIO},
			"rename /w/.stage /proc/self/fd/71/a: input/output error"},
		{errors.New("no descriptor"), "no descriptor"},
	} {
		got := unpinError(c.err, "/proc/self/fd/7", "/w/.stage")
		if got.Error() != c.want || !errors.Is(got, c.err) {
			t.Errorf("unpinError(%q) = %q, want %q", c.err, got, c.want)
		}
	}
	if got := unpinError(cause, "/w", "/w"); got != error(cause) {
		t.Errorf("a directory used by its path: %v", got)
	}
}
