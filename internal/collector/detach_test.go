package collector

import (
	"context"
	"github.com/cbdash/cbdash/internal/ingest"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// TestTheAgentHandlerReturnsWhileItsSessionGoesOn: once the websocket is
// accepted, ServeAgent returns (so net/http and the router let go of the
// request and its goroutine), and the session goes on without the
// request's context, which net/http ends when the handler returns: the
// agent's batches are still stored and acknowledged, and the collector's
// shutdown still ends the session with a going away.
func TestTheAgentHandlerReturnsWhileItsSessionGoesOn(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	returned := make(chan error, 1)
	ended := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h.col.ServeAgent(w, r)
		go func() {
			<-r.Context().Done() // net/http ends it once the handler has returned
			close(ended)
		}()
		returned <- err
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{
		Subprotocols: []string{protocol.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + h.token}},
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.CloseNow()
	a := &rawAgent{t: t, conn: conn}

	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("ServeAgent returned %v, want nil once the websocket is accepted", err)
		}
	case <-ctx.Done():
		t.Fatal("ServeAgent did not return while its session was open")
	}
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the request's context did not end after the handler returned")
	}

	started := h.now().UnixMilli()
	a.hello("i-1", started)
	for seq := uint64(1); seq <= 3; seq++ {
		a.send(h.batch(seq, 10, 1))
		var ack protocol.Ack
		a.expect(protocol.TypeAck, &ack)
		if ack.Seq != seq {
			t.Fatalf("ack %d, want %d", ack.Seq, seq)
		}
	}
	last, err := h.store.LastSeq(ctx, "api", "i-1", started)
	if err != nil || last != 3 {
		t.Fatalf("stored through seq %d (%v), want 3", last, err)
	}

	// The collector's shutdown ends the session, which no handler waits
	// for any more: the agent is told it is going away.
	go h.stop()
	var e protocol.Error
	a.expect(protocol.TypeError, &e)
	if !e.Fatal || !strings.Contains(e.Reason, "stopping") {
		t.Fatalf("error %+v, want a fatal going away naming the stop", e)
	}
}

// TestAPeerThatDoesNotAnswerItsCloseIsCutWithinTheGrace: after a fatal
// refusal (here a first message that is not a hello), the collector
// waits ingest.CloseGrace for the agent's answer to its close frame, not the
// websocket's 5 s: an agent that reads nothing more does not keep its
// connection (and session) open.
func TestAPeerThatDoesNotAnswerItsCloseIsCutWithinTheGrace(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	open := h.col.ing.Sessions
	eventually.True(t, "the session is open", func() bool { return open() == 1 })
	a.sendRaw([]byte(`{"type":"batch","seq":1}`)) // and reads nothing: its close is never answered
	eventually.Within(t, ingest.CloseGrace+3*time.Second, "the session ended within the close grace", func() bool { return open() == 0 })
}
