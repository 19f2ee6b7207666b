package ingest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// agentWriteBuffer is the size of an agent connection's write buffer
// (bytes). The collector writes an agent small messages (acks of about
// 25 bytes, a welcome, commands of a few hundred): net/http's 4 KB,
// which the websocket would keep for the connection's life, is 3 KB a
// connection held for nothing. A larger message is written through it
// in more than one write.
const agentWriteBuffer = 1024

// agentReadBuffer is the size of the read buffers agent connections share
// (bytes, see sharedReads): a batch of 20 window reports is about 6 KB, of
// 40 about 11 KB, so one read takes a whole batch where net/http's 4 KB
// buffer took two or three.
const agentReadBuffer = 16 << 10

// agentSocket is a ResponseWriter whose Hijack hands the websocket a
// write buffer of agentWriteBuffer bytes instead of net/http's own, and,
// on a connection with a file descriptor (TCP or a Unix socket, not TLS),
// a read buffer of 16 bytes over a sharedReads instead of net/http's 4
// KB one: both of net/http's buffers are left to the collector of garbage
// with the rest of the request once ServeAgent has returned (the write
// one is empty once hijacked, the 101 is flushed before; what the read
// one holds, bytes the agent sent behind its request, is carried over).
//
// It keeps the hijacked connection (conn), which the session closes
// itself when the agent does not answer a close frame in time (see
// session.closeWithin): the websocket has no other way to cut a
// connection whose close handshake is under way.
type agentSocket struct {
	http.ResponseWriter
	conn  net.Conn     // set by Hijack
	reads *sharedReads // set by Hijack on a connection with a file descriptor
}

func (w *agentSocket) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = conn
	bw := bufio.NewWriterSize(conn, agentWriteBuffer)
	sc, ok := conn.(syscall.Conn)
	if !ok || !canShareReads {
		return conn, bufio.NewReadWriter(brw.Reader, bw), nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return conn, bufio.NewReadWriter(brw.Reader, bw), nil
	}
	sr := newSharedReads(rc)
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		sr.carry(early)
	}
	w.reads = sr
	// The websocket resets the reader it is handed over the connection
	// it is handed (keeping what the reader has buffered, nothing here):
	// so the connection it is handed reads through sr as well.
	rconn := sharedReadsConn{conn, sr}
	return rconn, bufio.NewReadWriter(bufio.NewReaderSize(rconn, 16), bw), nil // bufio's smallest: the websocket reads a frame's header through it
}

// sharedReadsConn is a connection read through its sharedReads.
type sharedReadsConn struct {
	net.Conn
	r *sharedReads
}

func (c sharedReadsConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *agentSocket) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// readBuffers are the buffers of agentReadBuffer bytes that agent
// connections read into while a message is arriving.
var readBuffers = sync.Pool{New: func() any { b := make([]byte, agentReadBuffer); return &b }}

// sharedReads reads a socket into a buffer of readBuffers taken only once
// the socket has something to read (a non-blocking read in
// syscall.RawConn.Read, which waits on the runtime's network poller in
// between) and given back as soon as what it read is consumed: a
// connection waiting for its next message, as most of a thousand agents'
// are, holds no read buffer, where a bufio.Reader over the connection
// holds its buffer for the connection's life. A read of at least
// agentReadBuffer bytes, with nothing kept, goes straight into the
// caller's slice. Deadlines and Close work as for the connection's own
// Read (RawConn.Read honours them). Not safe for concurrent use (the
// websocket reads under its own lock).
type sharedReads struct {
	rc    syscall.RawConn
	buf   *[]byte // what was read and not yet consumed: (*buf)[r:w]; nil when none
	r, w  int
	fills int // reads that returned data or EOF (tests look)

	// The read under way (fill's readOnce, a method value made once so
	// that a read allocates nothing).
	into     []byte // where readOnce reads: nil for a buffer of readBuffers
	n        int
	err      error
	readOnce func(fd uintptr) bool
}

func newSharedReads(rc syscall.RawConn) *sharedReads {
	s := &sharedReads{rc: rc}
	s.readOnce = s.read
	return s
}

// carry keeps early (copied), to be read before the socket.
func (s *sharedReads) carry(early []byte) {
	b := make([]byte, len(early))
	copy(b, early)
	s.buf, s.r, s.w = &b, 0, len(b)
}

func (s *sharedReads) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.buf == nil {
		if len(p) >= agentReadBuffer {
			return s.fill(p)
		}
		if _, err := s.fill(nil); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*s.buf)[s.r:s.w])
	s.r += n
	if s.r == s.w {
		if cap(*s.buf) == agentReadBuffer {
			readBuffers.Put(s.buf)
		}
		s.buf = nil
	}
	return n, nil
}

// fill reads what the socket has, waiting for something: into p when p
// is not nil, into a buffer of readBuffers (s.buf) otherwise. A closed
// peer is io.EOF.
func (s *sharedReads) fill(p []byte) (int, error) {
	s.into, s.n, s.err = p, 0, nil
	if err := s.rc.Read(s.readOnce); err != nil {
		return 0, err
	}
	n, err := s.n, s.err
	s.into, s.err = nil, nil
	s.fills++
	if err != nil {
		return 0, &net.OpError{Op: "read", Err: os.NewSyscallError("read", err)}
	}
	if n == 0 {
		return 0, io.EOF
	}
	if p == nil {
		s.r, s.w = 0, n
	}
	return n, nil
}

// tooBigLinger and tooBigDrain bound how long, and how many bytes, a
// session refused for a message over the read limit reads and throws
// away of the rest of it (see drainTooBig): a hello of 100,000 breakers
// is 23 MB, which a busy machine may take seconds to receive. Kept short:
// a hostile peer trickling bytes holds its session (and a shutdown) for
// at most tooBigLinger.
const (
	tooBigLinger = 10 * time.Second
	tooBigDrain  = 32 << 20
)

// drainTooBig ends a connection whose read stopped at a message over the
// read limit, after the websocket has sent close 1009 (message too big):
// the rest of the message is still arriving, and closing a socket with
// unread data makes the kernel send a reset (RST), which can reach the
// agent before it has read the close frame (it sees a connection reset or
// EOF, not 1009). So the connection is half-closed (no more writes, a FIN
// after the close frame) and what the agent sends is read and thrown away
// until it closes its side (having read the close frame and answered
// it), sends nothing for CloseGrace, has sent tooBigDrain bytes, or
// tooBigLinger has passed; the caller then closes it (past those bounds
// the agent may see a reset). A no-op for a session without that refusal.
func (s *session) drainTooBig() {
	if !s.tooBig || s.raw == nil {
		return
	}
	drain(s.raw, CloseGrace, tooBigLinger, tooBigDrain)
}

// drain half-closes conn (when it can) and reads it into nothing until
// EOF, an error, idle without data, limit bytes read, or total has passed
// (real time: the waits are for a socket, not logical delays).
func drain(conn net.Conn, idle, total time.Duration, limit int64) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	bp := readBuffers.Get().(*[]byte)
	defer readBuffers.Put(bp)
	end := time.Now().Add(total)
	for {
		d := time.Now().Add(idle)
		if d.After(end) {
			d = end
		}
		if conn.SetReadDeadline(d) != nil {
			return
		}
		n, err := conn.Read(*bp)
		if err != nil {
			return
		}
		limit -= int64(n)
		if limit <= 0 {
			return
		}
	}
}
