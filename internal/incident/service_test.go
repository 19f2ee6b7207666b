package incident_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/store"
)

// countingStore is the real store, counting incident updates.
type countingStore struct {
	*store.Store
	updates atomic.Int64
}

func (c *countingStore) UpdateIncident(ctx context.Context, inc cbdash.Incident) error {
	c.updates.Add(1)
	return c.Store.UpdateIncident(ctx, inc)
}

// TestServiceCoalescesUpdatesAndFlushesOnStop runs in a synctest bubble:
// the test waits for the service to have handled the events
// (bubbletest.Settle) rather than polling the store.
func TestServiceCoalescesUpdatesAndFlushesOnStop(t *testing.T) {
	synctest.Test(t, testServiceCoalescesUpdatesAndFlushesOnStop)
}

func testServiceCoalescesUpdatesAndFlushesOnStop(t *testing.T) {
	st := &countingStore{Store: openStore(t)}
	f := &feed{ch: make(chan cbdash.Event)}
	// A tick of an hour never comes during the test: only the final flush
	// stores the updates.
	svc, err := incident.NewService(incident.ServiceConfig{Source: f, Store: st, Tick: time.Hour, Clock: clocktest.NewRunning()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	prev := map[string]string{}
	for _, s := range []step{tr(10, "a:open"), tr(11, "b:open"), tr(12, "c:open"), tr(15, "a:half_open"), tr(15, "a:open"), tr(16, "b:half_open")} {
		f.ch <- s.event(prev)
	}
	bubbletest.Settle()
	if l, err := st.Incidents(context.Background(), cbdash.IncidentQuery{}); err != nil || len(l) != 1 {
		t.Fatalf("incidents after the events = %+v (%v), want the one created", l, err)
	}
	if n := st.updates.Load(); n != 0 {
		t.Errorf("%d updates before a tick, want 0 (coalesced)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := st.updates.Load(); n != 1 {
		t.Errorf("%d updates at stop, want 1", n)
	}
	l, _ := st.Incidents(context.Background(), cbdash.IncidentQuery{})
	if len(l) != 1 || !slices.Equal(l[0].Instances, []string{"a", "b", "c"}) || l[0].Opens != 4 || !l[0].Open {
		t.Errorf("stored %+v, want one open incident with a, b, c and 4 opens", l)
	}
}
