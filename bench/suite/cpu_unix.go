//go:build unix

package suite

import (
	"syscall"
	"time"
)

// processCPU returns this process's CPU time so far, user + system, every
// thread; 0 when the system does not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
