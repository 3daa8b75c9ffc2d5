package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
)

// childResult is what a child process (capture-child, restore-child)
// reports of its one operation.
type childResult struct {
	wall, cpu float64 // seconds: the operation's wall time; the process's CPU time
	rssMiB    float64 // the process's peak resident set (VmHWM)
}

// runChild re-executes this program in a hidden mode and reads the three
// figures it prints.
func runChild(self, mode string, args ...string) (childResult, error) {
	var c childResult
	out, err := exec.Command(self, append([]string{mode}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return c, fmt.Errorf("%s: %v: %s", mode, err, ee.Stderr)
		}
		return c, fmt.Errorf("%s: %v", mode, err)
	}
	var kb float64
	if _, err := fmt.Sscan(string(out), &c.wall, &c.cpu, &kb); err != nil {
		return c, fmt.Errorf("%s printed %q", mode, out)
	}
	c.rssMiB = kb / 1024
	return c, nil
}

// captureChild captures tree into a new store (no default exclusions) and
// prints the seconds of Open + Capture, the process's CPU seconds and its
// peak RSS in kB (read from /proc/self/status: Linux carries ru_maxrss
// across exec, so the parent's rusage of a child includes the parent).
func captureChild(tree, store string) int {
	d, _, err := timeCapture(context.Background(), store, tree, "bench")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(d.Seconds(), cpuTime().Seconds(), peakRSSkB())
	return 0
}

// restoreChild restores the head of thread "bench" of store into target
// (no default exclusions) and prints what captureChild prints.
func restoreChild(store, target string) int {
	ctx := context.Background()
	t := time.Now()
	err := func() error {
		db, err := engine.Open(store, &engine.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		defer db.Close()
		head, err := db.Head(ctx, "bench")
		if err != nil {
			return err
		}
		_, err = db.Restore(ctx, head, target, &sbxdb.RestoreOptions{Policy: allFiles})
		return err
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(time.Since(t).Seconds(), cpuTime().Seconds(), peakRSSkB())
	return 0
}
