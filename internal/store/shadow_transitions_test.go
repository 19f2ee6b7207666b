package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// A shadow configuration's would-be transitions are stored apart: they
// are read with ShadowTransitions only, with their shadow's name, and
// never count as a live transition (Transitions, OpensSince, the
// breaker's state).
func TestShadowTransitionsStoredApart(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	if err := s.SaveHello(ctx, hello("pay", "pay-1", 1, "db"), t0); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Second).UnixMilli()
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1,
		ShadowTransitions: []protocol.Transition{
			{Breaker: "db", Shadow: "tight", From: protocol.StateClosed, To: protocol.StateOpen, At: at, Generation: 2,
				Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 30, Threshold: 20, WindowCalls: 10, WindowFailed: 3}, OpenMillis: 10000},
		},
		Windows: []protocol.Window{window("db", t0, protocol.StateClosed, 7, 3)},
	})
	live, err := s.Transitions(ctx, cbdash.TransitionQuery{Service: "pay", Breaker: "db"})
	if err != nil || len(live) != 0 {
		t.Fatalf("live transitions: %v %+v", err, live)
	}
	opens, err := s.OpensSince(ctx, t0)
	if err != nil || len(opens) != 0 {
		t.Fatalf("opens: %v %v", err, opens)
	}
	sh, err := s.ShadowTransitions(ctx, cbdash.TransitionQuery{Service: "pay", Breaker: "db"})
	if err != nil || len(sh) != 1 {
		t.Fatalf("shadow transitions: %v %+v", err, sh)
	}
	if r := sh[0]; r.Shadow != "tight" || r.Instance != "pay-1" || r.To != protocol.StateOpen || r.At != at ||
		r.Cause.FailureRate != 30 || r.OpenMillis != 10000 || r.Generation != 2 {
		t.Fatalf("shadow transition: %+v", r)
	}
	insts, err := s.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ib := range insts {
		if ib.Breaker == "db" && ib.State == protocol.StateOpen {
			t.Fatalf("a shadow transition moved the breaker's state: %+v", ib)
		}
	}
	if other, err := s.ShadowTransitions(ctx, cbdash.TransitionQuery{Service: "shop"}); err != nil || len(other) != 0 {
		t.Fatalf("other service: %v %+v", err, other)
	}
}
