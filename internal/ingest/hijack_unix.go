//go:build unix

package ingest

import "syscall"

// canShareReads: agent sockets are read through sharedReads.
const canShareReads = true

// read is RawConn.Read's function: one non-blocking read; false (wait for
// the socket to be readable, then call again) when there is nothing yet.
func (s *sharedReads) read(fd uintptr) bool {
	dst := s.into
	var b *[]byte
	if dst == nil {
		b = readBuffers.Get().(*[]byte)
		dst = *b
	}
	for {
		n, err := syscall.Read(int(fd), dst)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			if b != nil {
				readBuffers.Put(b)
			}
			return false
		}
		if n < 0 {
			n = 0
		}
		s.n, s.err = n, err
		if b != nil {
			if n > 0 {
				s.buf = b
			} else {
				readBuffers.Put(b)
			}
		}
		return true
	}
}
