package collector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// closedWithin reads from a until the connection ends, failing the test
// when it is still open after d.
func closedWithin(t *testing.T, a *rawAgent, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, _, err := a.conn.Read(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if err != nil {
			if timedOut {
				break
			}
			return
		}
	}
	t.Fatalf("the agent connection is still open %v after its token was revoked", d)
}

func TestRevokingAnAgentTokenClosesItsConnections(t *testing.T) {
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
		closedWithin(t, a, 2*time.Second)
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
		closedWithin(t, b, 5*time.Second)
	})
}
