package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestAnAgentsSocketWritesThroughASmallBufferAndLosesNothing: the
// websocket of agentSocket writes through a buffer of agentWriteBuffer
// bytes, and messages larger than it (and many small ones behind each
// other) reach the peer whole and in order.
func TestAnAgentsSocketWritesThroughASmallBufferAndLosesNothing(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("0123456789abcdef"), 4*agentWriteBuffer/16+3) // over 4 buffers, not a multiple of one
	sizes := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(hijackSpy{&agentSocket{ResponseWriter: w}, sizes}, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer conn.CloseNow()
		ctx := context.Background()
		for _, m := range [][]byte{[]byte("a"), big, []byte("b"), []byte(strings.Repeat("c", agentWriteBuffer-10)), []byte("d")} {
			if err := conn.Write(ctx, websocket.MessageText, m); err != nil {
				t.Errorf("write: %v", err)
				return
			}
		}
		conn.Close(websocket.StatusNormalClosure, "")
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(int64(2 * len(big)))
	for i, want := range []string{"a", string(big), "b", strings.Repeat("c", agentWriteBuffer-10), "d"} {
		_, got, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(got) != want {
			t.Fatalf("message %d: %d bytes, want %d", i, len(got), len(want))
		}
	}
	if got := <-sizes; got != agentWriteBuffer {
		t.Fatalf("write buffer %d bytes, want %d", got, agentWriteBuffer)
	}
}

// hijackSpy reports the size of the write buffer its Hijack hands on.
type hijackSpy struct {
	*agentSocket
	sizes chan<- int
}

func (h hijackSpy) Hijack() (c net.Conn, brw *bufio.ReadWriter, err error) {
	c, brw, err = h.agentSocket.Hijack()
	if err == nil {
		h.sizes <- brw.Writer.Size()
	}
	return c, brw, err
}

// readSizes are the sizes of the messages the read tests send: around
// bufio's 16 bytes, around agentReadBuffer, and several buffers' worth.
var readSizes = []int{1, 15, 16, 17, 125, 126, 6000, agentReadBuffer - 1, agentReadBuffer, agentReadBuffer + 1, 5*agentReadBuffer + 7, 3}

// payload is message i of n bytes, different from its neighbours'.
func payload(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte('a' + (i*7+j)%26)
	}
	return b
}

// echoLengths serves a websocket through agentSocket that answers each
// message with "<length> <sha256>", and tells on reads whether the
// connection reads through a sharedReads and, after each message, whether
// it still holds a read buffer (or has not read the socket through it).
func echoLengths(t *testing.T, reads chan<- bool, held chan<- bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as := &agentSocket{ResponseWriter: w}
		conn, err := websocket.Accept(as, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer conn.CloseNow()
		reads <- as.reads != nil
		conn.SetReadLimit(1 << 20)
		ctx := context.Background()
		for {
			_, m, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if as.reads != nil {
				held <- as.reads.buf != nil || as.reads.fills == 0
			}
			if err := conn.Write(ctx, websocket.MessageText, fmt.Appendf(nil, "%d %x", len(m), sha256.Sum256(m))); err != nil {
				return
			}
		}
	})
}

// TestAnAgentsSocketReadsEveryMessageWholeAndHoldsNoBufferBetween: over
// TCP the websocket reads through a sharedReads; messages of every size
// around its buffers arrive whole and in order, whether sent one at a
// time or all behind each other, and once a message is read the
// connection holds no read buffer. Over TLS (no file descriptor to poll)
// net/http's reader stays, and the messages arrive whole as well.
func TestAnAgentsSocketReadsEveryMessageWholeAndHoldsNoBufferBetween(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		start  func(http.Handler) *httptest.Server
		shared bool
	}{
		{"tcp", httptest.NewServer, canShareReads},
		{"tls", httptest.NewTLSServer, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads, held := make(chan bool, 1), make(chan bool, 2*len(readSizes))
			srv := tc.start(echoLengths(t, reads, held))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			if got := <-reads; got != tc.shared {
				t.Fatalf("reads through sharedReads: %v, want %v", got, tc.shared)
			}
			expect := func(i, n int) {
				t.Helper()
				_, got, err := conn.Read(ctx)
				if err != nil {
					t.Fatalf("answer to message %d: %v", i, err)
				}
				if want := fmt.Sprintf("%d %x", n, sha256.Sum256(payload(i, n))); string(got) != want {
					t.Fatalf("message %d of %d bytes arrived as %q", i, n, got)
				}
			}
			// One at a time: the server waits for each.
			for i, n := range readSizes {
				if err := conn.Write(ctx, websocket.MessageText, payload(i, n)); err != nil {
					t.Fatal(err)
				}
				expect(i, n)
				if tc.shared {
					if <-held {
						t.Fatalf("after message %d (%d bytes) the connection holds a read buffer, or did not read it through sharedReads", i, n)
					}
				}
			}
			// All behind each other: reads find several messages at once.
			for i, n := range readSizes {
				if err := conn.Write(ctx, websocket.MessageText, payload(i, n)); err != nil {
					t.Fatal(err)
				}
			}
			for i, n := range readSizes {
				expect(i, n)
			}
		})
	}
}

// TestBytesAnAgentSendsBehindItsUpgradeRequestAreNotLost: a client that
// writes its first message in the same packet as its upgrade request (it
// need not wait for the 101) has that message read: net/http has it in
// its own read buffer at the hijack, and agentSocket carries it over.
func TestBytesAnAgentSendsBehindItsUpgradeRequestAreNotLost(t *testing.T) {
	t.Parallel()
	reads, held := make(chan bool, 1), make(chan bool, 4)
	srv := httptest.NewServer(echoLengths(t, reads, held))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n\r\n"
	first, second := payload(0, 300), payload(1, 20)
	wire := append([]byte(req), clientFrame(first)...)
	wire = append(wire, clientFrame(second)...)
	if _, err := c.Write(wire); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := <-reads; got != canShareReads {
		t.Fatalf("the connection reads through sharedReads: %v, want %v", got, canShareReads)
	}
	for i, m := range [][]byte{first, second} {
		got := serverFrame(t, br)
		if want := fmt.Sprintf("%d %x", len(m), sha256.Sum256(m)); got != want {
			t.Fatalf("message %d arrived as %q, want %q", i, got, want)
		}
	}
}

// clientFrame is a masked text frame of p (RFC 6455, 5.2).
func clientFrame(p []byte) []byte {
	f := []byte{0x81}
	switch {
	case len(p) < 126:
		f = append(f, 0x80|byte(len(p)))
	case len(p) <= 0xffff:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(len(p)))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(len(p)))
	}
	mask := [4]byte{1, 2, 3, 4}
	f = append(f, mask[:]...)
	for i, b := range p {
		f = append(f, b^mask[i%4])
	}
	return f
}

// serverFrame reads an unmasked text frame of under 64 KB.
func serverFrame(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		t.Fatal(err)
	}
	n := int(h[1] & 0x7f)
	if n == 126 {
		var l [2]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			t.Fatal(err)
		}
		n = int(binary.BigEndian.Uint16(l[:]))
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatal(err)
	}
	return string(p)
}
