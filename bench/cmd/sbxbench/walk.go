package main

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The walk floor: what any capture of a tree must do to learn that nothing
// changed, timed in process on the same tree in the same run. Each
// directory is opened and read whole (ReadDir), and each entry is
// lstat-ed relative to it (fstatat with AT_SYMLINK_NOFOLLOW), as sbxdb's
// capture does; nothing is read, hashed or kept. walkSerial does it on one
// goroutine, depth first; walkParallel reads up to 2 x GOMAXPROCS
// directories at once, the bound capture's walk uses.

// walkDir opens and reads one directory, lstats each entry and returns
// the subdirectories' paths and the count of entries.
func walkDir(dir string) (subdirs []string, n int, err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, 0, err
	}
	fd := int(f.Fd())
	var st unix.Stat_t
	for _, e := range ents {
		if err := unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, 0, &os.PathError{Op: "fstatat", Path: filepath.Join(dir, e.Name()), Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			subdirs = append(subdirs, filepath.Join(dir, e.Name()))
		}
	}
	return subdirs, len(ents), nil
}

// walkSerial walks root on one goroutine and returns the entries seen.
func walkSerial(root string) (int, error) {
	total := 0
	stack := []string{root}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		subs, n, err := walkDir(d)
		if err != nil {
			return 0, err
		}
		total += n
		stack = append(stack, subs...)
	}
	return total, nil
}

// walkParallel walks root reading up to 2 x GOMAXPROCS directories at once
// and returns the entries seen.
func walkParallel(root string) (int, error) {
	var (
		total   atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
		sem     = make(chan struct{}, 2*runtime.GOMAXPROCS(0))
	)
	var visit func(d string)
	visit = func(d string) {
		defer wg.Done()
		sem <- struct{}{}
		subs, n, err := walkDir(d)
		<-sem
		if err != nil {
			errOnce.Do(func() { first = err })
			return
		}
		total.Add(int64(n))
		for _, s := range subs {
			wg.Add(1)
			go visit(s)
		}
	}
	wg.Add(1)
	visit(root)
	wg.Wait()
	return int(total.Load()), first
}
