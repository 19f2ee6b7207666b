package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// dbLock is a server's claim on its SQLite file: an exclusive advisory
// lock (flock) on DB + ".lock", held while the server runs and released
// by the kernel when the process ends however it ends (kill -9 too), so it
// never goes stale. Two servers on one SQLite file would each believe
// they lead: both would write the same seconds (history doubled), rewrite
// the demo's alert rule, and open incidents neither closes. SQLite's own
// locks keep the file whole but not the record true.
type dbLock struct{ f *os.File }

// errDBInUse is returned when another server holds the lock.
var errDBInUse = errors.New("in use by another cbdash server")

// lockDB takes the lock of SQLite file path, writing who holds it (pid,
// address, since) into the lock file for the next one to read. Errors:
// errDBInUse (wrapped, with what the holder wrote) when another process
// holds it; an I/O error opening the lock file.
func lockDB(path, addr string, now time.Time) (*dbLock, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file %s: %w", name, err)
	}
	if err := flockExclusive(f); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("the database %s is %w (%s): stop it, or give this one a database of its own (--db; for make demo, DEMO_DB=...)",
				path, errDBInUse, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock file %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d, listening on %s, since %s\n", os.Getpid(), addr, now.UTC().Format(time.RFC3339))), 0)
	}
	return &dbLock{f: f}, nil
}

// release gives the lock up (the file stays: removing it could let a
// third server lock a new file while a second still waits on the old).
func (l *dbLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = flockRelease(l.f)
	l.f.Close()
	l.f = nil
}
