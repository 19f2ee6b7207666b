package collector

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// closedWithin reads from a until the connection ends, failing the test
// when it is still open after d, and returns the last error message it
// got before the close (zero if none) and the close status.
func closedWithin(t *testing.T, a *rawAgent, d time.Duration) (protocol.Error, websocket.StatusCode) {
	t.Helper()
	var last protocol.Error
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, data, err := a.conn.Read(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if err != nil {
			if timedOut {
				break
			}
			return last, websocket.CloseStatus(err)
		}
		var e protocol.Error
		if json.Unmarshal(data, &e) == nil && e.Type == protocol.TypeError {
			last = e
		}
	}
	t.Fatalf("the agent connection is still open %v after its token was revoked", d)
	return last, 0
}

// revokedClose checks what a revoked token's connection got before its
// close: a permanent fatal error naming the token, then status 1008, as
// docs/protocol.md says.
func revokedClose(t *testing.T, e protocol.Error, code websocket.StatusCode) {
	t.Helper()
	if !e.Fatal || e.Retry || !strings.Contains(e.Reason, "agent token revoked") {
		t.Errorf("the last message before the close: %+v, want a fatal error without retry naming the revoked token", e)
	}
	if code != websocket.StatusPolicyViolation {
		t.Errorf("close status %v, want 1008 (policy violation)", code)
	}
}

func TestRevokingAnAgentTokenClosesItsConnections(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	ctx := context.Background()
	other, err := h.store.CreateAgentToken(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	a := dialRaw(t, h, h.token)
	a.hello("api-1", 1)
	b := dialRaw(t, h, other)
	b.hello("api-2", 1)

	t.Run("revoked through the collector: closed at once, the reconnect refused", func(t *testing.T) {
		n, err := h.col.RevokeAgentToken(ctx, "ada", store.AgentTokenID(h.token))
		if err != nil || n != 1 {
			t.Fatalf("RevokeAgentToken = %d, %v; want 1 connection closed", n, err)
		}
		last, code := closedWithin(t, a, 2*time.Second)
		revokedClose(t, last, code)
		again := dialRaw(t, h, h.token)
		again.send(rawHello("api-1", 1))
		var e protocol.Error
		again.expect(protocol.TypeError, &e)
		if !e.Fatal || !strings.Contains(e.Reason, "agent token") {
			t.Errorf("reconnect with a revoked token: %+v, want a fatal token error", e)
		}
	})
	t.Run("the other token's connection stays open", func(t *testing.T) {
		b.send(h.batch(1, 10, 0))
		b.expect(protocol.TypeAck, nil)
	})
	t.Run("revoked in the database by another process: closed within the sweep", func(t *testing.T) {
		if err := h.store.RevokeAgentToken(ctx, "cli", store.AgentTokenID(other)); err != nil {
			t.Fatal(err)
		}
		e, code := closedWithin(t, b, 5*time.Second)
		revokedClose(t, e, code)
	})
}
