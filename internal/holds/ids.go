package holds

import (
	"crypto/rand"
	"fmt"
	"hash/fnv"
	"time"
)

// newHoldID names a hold created at created: "h", 11 hex digits of its
// Unix ms, 5 of a per-process sequence, so that of two holds created in
// the same millisecond the later has the greater id (the tie-break of
// cbdash.HoldRecord.Superseded: the most recent wins).
func (m *Manager) newHoldID(created time.Time) string {
	return fmt.Sprintf("h%011x%05x", created.UnixMilli()&(1<<44-1), m.seq.Add(1)&(1<<20-1))
}

// shortID is 8 random lower-case hex digits.
func shortID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// CommandID is the id of the command hold holdID is sent as to service:
// "<hold id>-<8 hex digits of the service's FNV-1a hash>".
func CommandID(holdID, service string) string { return holdID + "-" + serviceHash(service) }

// ReleaseCommandID is the id of the command hold holdID's release is sent
// as to service: "<hold id>-r<8 hex digits of the service's FNV-1a hash>".
func ReleaseCommandID(holdID, service string) string { return holdID + "-r" + serviceHash(service) }

func serviceHash(service string) string {
	h := fnv.New32a()
	h.Write([]byte(service))
	return fmt.Sprintf("%08x", h.Sum32())
}
