package web_test

import "syscall"

// smallReceiveBuffer sets a socket's receive buffer to its smallest, so
// that a client that does not read stops the server's writes soon.
func smallReceiveBuffer(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
	}); cerr != nil {
		return cerr
	}
	return err
}
