package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestSaveBatchStoresOnceAndReportsDuplicates(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	if err := s.SaveHello(ctx, hello("pay", "pay-1", 100, "db", "psp"), t0); err != nil {
		t.Fatal(err)
	}
	tr := protocol.Transition{Breaker: "db", From: protocol.StateClosed, To: protocol.StateOpen, At: t0.UnixMilli(),
		Generation: 3, Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50, WindowCalls: 20}, OpenMillis: 5000}
	b1 := protocol.Batch{Seq: 1, Transitions: []protocol.Transition{tr},
		Windows: []protocol.Window{window("db", t0, protocol.StateOpen, 5, 5)}}
	if !mustSave(t, s, "pay", "pay-1", 100, b1) {
		t.Fatal("first batch reported as duplicate")
	}
	if mustSave(t, s, "pay", "pay-1", 100, b1) {
		t.Fatal("resent batch 1 stored again")
	}
	b2 := protocol.Batch{Seq: 2, Windows: []protocol.Window{window("db", t0.Add(time.Second), protocol.StateOpen, 1, 0)}}
	if !mustSave(t, s, "pay", "pay-1", 100, b2) {
		t.Fatal("batch 2 reported as duplicate")
	}
	// A restarted process (new StartedAt) counts from 1 again.
	if !mustSave(t, s, "pay", "pay-1", 200, protocol.Batch{Seq: 1}) {
		t.Fatal("seq 1 of a new agent process reported as duplicate")
	}
	for _, c := range []struct {
		started int64
		want    uint64
	}{{100, 2}, {200, 1}, {300, 0}} {
		got, err := s.LastSeq(ctx, "pay", "pay-1", c.started)
		if err != nil || got != c.want {
			t.Errorf("LastSeq(started %d) = %d, %v; want %d", c.started, got, err, c.want)
		}
	}
	trs, err := s.Transitions(ctx, cbdash.TransitionQuery{Service: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) != 1 {
		t.Fatalf("got %d transitions, want 1 (stored once)", len(trs))
	}
	got := trs[0]
	if got.Instance != "pay-1" || got.Transition != tr || !got.ReceivedAt.Equal(t0) {
		t.Errorf("transition = %+v, want %+v received at %v", got, tr, t0)
	}
}

func TestSaveBatchRefusesInvalidInput(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	for name, c := range map[string]struct {
		service, instance string
		seq               uint64
	}{
		"empty service":  {"", "i", 1},
		"empty instance": {"svc", " ", 1},
		"zero seq":       {"svc", "i", 0},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.SaveBatch(context.Background(), c.service, c.instance, 1, protocol.Batch{Seq: c.seq}, t0)
			if !errors.Is(err, cbdash.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestWritesAfterCloseReturnErrClosed(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.SaveBatch(context.Background(), "a", "b", 1, protocol.Batch{Seq: 1}, t0)
	if !errors.Is(err, store.ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
