//go:build !unix

package ingest

import "errors"

// canShareReads: agent sockets keep net/http's reader here (sharedReads
// reads with the Unix read system call).
const canShareReads = false

func (s *sharedReads) read(uintptr) bool {
	s.err = errors.ErrUnsupported
	return true
}
