//go:build !unix

package suite

import "time"

// processCPU returns 0: the CPU time of the process is read on unix only.
func processCPU() time.Duration { return 0 }
