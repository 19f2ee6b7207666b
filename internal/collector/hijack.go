package collector

import (
	"bufio"
	"net"
	"net/http"
)

// agentWriteBuffer is the size of an agent connection's write buffer
// (bytes). The collector writes an agent small messages (acks of about
// 25 bytes, a welcome, commands of a few hundred): net/http's 4 KB,
// which the websocket would keep for the connection's life, is 3 KB a
// connection held for nothing. A larger message is written through it
// in more than one write.
const agentWriteBuffer = 1024

// smallWrites is a ResponseWriter whose Hijack hands the websocket a
// write buffer of agentWriteBuffer bytes instead of net/http's own (the
// read buffer stays: a batch is read through it). net/http's buffer is
// empty once hijacked (the 101 is flushed before), and left to the
// collector of garbage with the rest of the request once ServeAgent has
// returned.
//
// It keeps the hijacked connection (conn), which the session closes
// itself when the agent does not answer a close frame in time (see
// session.closeWithin): the websocket has no other way to cut a
// connection whose close handshake is under way.
type smallWrites struct {
	http.ResponseWriter
	conn net.Conn // set by Hijack
}

func (w *smallWrites) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = conn
	return conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(conn, agentWriteBuffer)), nil
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *smallWrites) Unwrap() http.ResponseWriter { return w.ResponseWriter }
