//go:build linux

// Package disktest gives tests small file systems that fail the way real
// disks do: a size-limited tmpfs that fills up (ENOSPC) and can be made
// read-only (EROFS). Mounting needs CAP_SYS_ADMIN (root in a container
// or a CI runner); without it the tests that need one are skipped, unless
// CBDASH_TEST_TMPFS names a mounted tmpfs of at most a few MiB that the
// test may fill (it is then used, and not remounted).
package disktest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new directory and returns it;
// it is unmounted when the test ends. The test is skipped when no tmpfs
// can be had.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	if dir := os.Getenv("CBDASH_TEST_TMPFS"); dir != "" {
		sub, err := os.MkdirTemp(dir, "t")
		if err != nil {
			t.Fatalf("CBDASH_TEST_TMPFS: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(sub) })
		return sub
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Skipf("no tmpfs for this test (mount: %v; set CBDASH_TEST_TMPFS to a small mounted tmpfs)", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// ReadOnly remounts the tmpfs at dir (from Tmpfs) read-only; the test is
// skipped when it cannot be.
func ReadOnly(t testing.TB, dir string) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount %s read-only: %v", dir, err)
	}
}

// Fill writes a file in dir until the file system is full and returns a
// function that removes it (freeing the space).
func Fill(t testing.TB, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	return func() { os.Remove(path) }
}
