package collector

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestAnAgentsSocketWritesThroughASmallBufferAndLosesNothing: the
// websocket of smallWrites writes through a buffer of agentWriteBuffer
// bytes, and messages larger than it (and many small ones behind each
// other) reach the peer whole and in order.
func TestAnAgentsSocketWritesThroughASmallBufferAndLosesNothing(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 4*agentWriteBuffer/16+3) // over 4 buffers, not a multiple of one
	sizes := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(hijackSpy{&smallWrites{ResponseWriter: w}, sizes}, r, nil)
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
	*smallWrites
	sizes chan<- int
}

func (h hijackSpy) Hijack() (c net.Conn, brw *bufio.ReadWriter, err error) {
	c, brw, err = h.smallWrites.Hijack()
	if err == nil {
		h.sizes <- brw.Writer.Size()
	}
	return c, brw, err
}
