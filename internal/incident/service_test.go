package incident_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
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

func TestServiceCoalescesUpdatesAndFlushesOnStop(t *testing.T) {
	st := &countingStore{Store: openStore(t)}
	f := &feed{ch: make(chan cbdash.Event)}
	// A tick of an hour never comes during the test: only the final flush
	// stores the updates.
	svc, err := incident.NewService(incident.ServiceConfig{Source: f, Store: st, Tick: time.Hour, Clock: breakertest.NewClock(t0)})
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
	f.ch <- cbdash.Event{} // an event the detector ignores: the ones before are handled
	eventually.True(t, "the incident to be created", func() bool {
		l, _ := st.Incidents(context.Background(), cbdash.IncidentQuery{})
		return len(l) == 1
	})
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
