package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The collector's probe rotation defers an open breaker's probes with a
// defer_probes command; an agent that loses the collector ends the
// deferral at once, so the instance probes on its own again.
func TestDeferProbesAppliedAndEndedWhenTheCollectorIsLost(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	calls(f.b, 4, true)
	if s := f.b.State(); s != breaker.Open {
		t.Fatalf("state %v, want open", s)
	}
	cmd := protocol.Command{Type: protocol.TypeCommand, ID: "d1", Breaker: "payments", Action: protocol.ActionDeferProbes,
		TTLMillis: 60_000, Actor: "cbdash (quorum)", Reason: "probe rotation"}
	if err := f.col.sendJSON(cmd); err != nil {
		t.Fatal(err)
	}
	f.tick()
	waitFor(t, 5*time.Second, "the deferral's result", func() bool {
		return slices.ContainsFunc(f.col.results(), func(r protocol.CommandResult) bool { return r.ID == "d1" })
	})
	i := slices.IndexFunc(f.col.results(), func(r protocol.CommandResult) bool { return r.ID == "d1" })
	if r := f.col.results()[i]; !r.OK || r.State != protocol.StateOpen {
		t.Fatalf("result %+v, want ok in state open", r)
	}
	want := f.now().Add(time.Minute)
	if got := f.b.Snapshot().ProbesDeferredUntil; got.Before(want.Add(-time.Second)) || got.After(want) {
		t.Fatalf("deferred until %v, want about %v", got, want)
	}
	f.clock.Advance(10 * time.Second) // past the 5 s open duration
	if s := f.b.State(); s != breaker.Open {
		t.Fatalf("deferred, 10 s in: %v, want open", s)
	}
	f.col.stop()
	waitFor(t, 5*time.Second, "the deferral ended with the collector lost", func() bool {
		return f.b.Snapshot().ProbesDeferredUntil.IsZero()
	})
	if s := f.b.State(); s != breaker.HalfOpen {
		t.Fatalf("collector lost: %v, want half_open at once (its open duration is long past)", s)
	}
	if !f.logs.contains("probing on its own again") {
		t.Errorf("the end of the deferral was not logged:\n%s", f.logs)
	}
}
