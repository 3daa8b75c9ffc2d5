//go:build !unix

package main

import "errors"

// mkfifo fails: named pipes are a unix system's.
func mkfifo(string) error { return errors.ErrUnsupported }
