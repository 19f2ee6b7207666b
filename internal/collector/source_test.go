package collector

import (
	"context"
	"errors"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestIngestRunsTheHTTPIngestSteps(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	ctx := context.Background()
	hello := rawHello("api-1", h.now().UnixMilli())

	t.Run("a batch is stored and applied before Ingest returns", func(t *testing.T) {
		b := h.batch(1, 10, 4)
		resp, err := h.col.Ingest(ctx, &hello, &b)
		if err != nil || resp.AckedSeq != 1 {
			t.Fatalf("Ingest: %+v, %v; want acked 1", resp, err)
		}
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
		if err != nil || d.Recent.Admitted != 10 || d.Recent.Failures != 4 {
			t.Errorf("live state %+v, %v; want the batch's counts", d.Recent, err)
		}
		if last, err := h.store.LastSeq(ctx, "api", "api-1", hello.StartedAt); err != nil || last != 1 {
			t.Errorf("stored seq %d, %v; want 1", last, err)
		}
	})
	t.Run("a duplicate is acknowledged, not stored again", func(t *testing.T) {
		b := h.batch(1, 10, 4)
		resp, err := h.col.Ingest(ctx, &hello, &b)
		if err != nil || resp.AckedSeq != 1 {
			t.Fatalf("Ingest: %+v, %v; want acked 1", resp, err)
		}
		d, _ := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
		if d.Recent.Admitted != 10 {
			t.Errorf("admitted %d after the duplicate, want 10", d.Recent.Admitted)
		}
	})
	t.Run("an invalid hello or batch is refused as invalid", func(t *testing.T) {
		bad := hello
		bad.Breakers = nil
		b := h.batch(2, 1, 0)
		if _, err := h.col.Ingest(ctx, &bad, &b); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("a hello without breakers: %v, want ErrInvalid", err)
		}
		b.Windows[0].Breaker = "undeclared"
		if _, err := h.col.Ingest(ctx, &hello, &b); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("a window of an undeclared breaker: %v, want ErrInvalid", err)
		}
	})
}

func TestIngestBeforeRunIsRetryLater(t *testing.T) {
	t.Parallel()
	c, err := New(Config{Store: storetest.OpenFile(t, storetest.Path(t), store.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	hello := rawHello("api-1", 1)
	b := protocol.Batch{Type: protocol.TypeBatch, Seq: 1}
	_, err = c.Ingest(context.Background(), &hello, &b)
	if err == nil || errors.Is(err, cbdash.ErrInvalid) {
		t.Errorf("Ingest before Run: %v, want a refusal to retry later", err)
	}
}
