package faultfs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/vfs/faultfs"
)

// A test records the steps of a call, then fails one of them: here the
// first fsync, as a full disk would.
func Example() {
	dir, _ := os.MkdirTemp("", "faultfs")
	defer os.RemoveAll(dir)
	fs := faultfs.New(vfs.OS)
	fs.FailNth(faultfs.Sync, 1, syscall.ENOSPC)

	f, err := fs.OpenFile(filepath.Join(dir, "blob"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	f.Write([]byte("bytes"))
	err = f.Sync()
	f.Close()
	fmt.Println(errors.Is(err, syscall.ENOSPC))
	for _, e := range fs.Events() {
		fmt.Println(e.Op, e.N, filepath.Base(e.Path))
	}
	fmt.Println("failed:", fs.Fired()[0].Op)
	// Output:
	// true
	// create 1 blob
	// write 1 blob
	// sync 1 blob
	// close 1 blob
	// failed: sync
}
