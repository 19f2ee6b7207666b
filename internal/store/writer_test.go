package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestSaveBatchGivesUpWhenTheQueueIsFullAndCtxEnds(t *testing.T) {
	s, err := Open(context.Background(), testDSN(t, "q.db"), Options{QueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Hold the writer inside a transaction, then fill the one queue slot.
	entered, release := make(chan struct{}), make(chan struct{})
	go s.w.do(context.Background(), &op{run: func(*wtx) error {
		close(entered)
		<-release
		return nil
	}})
	<-entered
	if !s.w.try(&op{run: func(*wtx) error { return nil }}) {
		t.Fatal("the queue slot is taken already")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = s.SaveBatch(ctx, "pay", "pay-1", 1, protocol.Batch{Seq: 1}, clocktest.Epoch())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SaveBatch on a full queue = %v, want context.DeadlineExceeded", err)
	}
	close(release)
	// The writer drains and takes new work again.
	if stored, err := s.SaveBatch(context.Background(), "pay", "pay-1", 1, protocol.Batch{Seq: 1}, clocktest.Epoch()); err != nil || !stored {
		t.Fatalf("SaveBatch after the queue drained = %v, %v", stored, err)
	}
}

func TestCloseStopsTheWriterGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := Open(context.Background(), testDSN(t, "g.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveBatch(context.Background(), "pay", "pay-1", 1, protocol.Batch{Seq: 1}, clocktest.Epoch()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesNegativeOptionsNamingTheField(t *testing.T) {
	for field, opts := range map[string]Options{
		"Retention.Minutes": {Retention: Retention{Minutes: -time.Second}},
		"QueueSize":         {QueueSize: -1},
	} {
		t.Run(field, func(t *testing.T) {
			_, err := Open(context.Background(), testDSN(t, "o.db"), opts)
			if err == nil || !strings.Contains(err.Error(), field) {
				t.Fatalf("Open = %v, want an error naming %s", err, field)
			}
		})
	}
}
