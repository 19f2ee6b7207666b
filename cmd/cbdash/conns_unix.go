//go:build unix

package main

import "syscall"

// openFileLimit is the process's limit of open files (RLIMIT_NOFILE, the
// soft limit, which the Go runtime raises to the hard one at start); 0
// when unknown.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur) // int64 on some systems
}
