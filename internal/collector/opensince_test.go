package collector

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestEpisodeOfStoredTransitions(t *testing.T) {
	t.Parallel()
	at := func(s int) int64 { return int64(s) * 1000 }
	tr := func(s int, from, to string) cbdash.TransitionRecord {
		return cbdash.TransitionRecord{Transition: protocol.Transition{From: from, To: to, At: at(s)}}
	}
	const c, o, h, fo, fc = protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen, protocol.StateForcedClosed
	for _, tc := range []struct {
		name string
		trs  []cbdash.TransitionRecord // newest first
		want int64
	}{
		{"a trip then failed probes", []cbdash.TransitionRecord{tr(9, h, o), tr(8, o, h), tr(4, h, o), tr(3, o, h), tr(1, c, o)}, at(1)},
		{"an earlier episode ended", []cbdash.TransitionRecord{tr(9, c, o), tr(8, h, c), tr(4, o, h), tr(1, c, o)}, at(9)},
		{"held open from held closed", []cbdash.TransitionRecord{tr(5, fc, fo)}, at(5)},
		{"closed now", []cbdash.TransitionRecord{tr(5, o, c), tr(1, c, o)}, 0},
		{"start older than the lookback", []cbdash.TransitionRecord{tr(9, h, o), tr(8, o, h)}, at(8)},
		{"none stored", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := episodeOf(tc.trs)
			if (tc.want == 0) != (got == nil) || (tc.want != 0 && got.At != tc.want) {
				t.Fatalf("episode start %+v, want at %d ms", got, tc.want)
			}
		})
	}
}

// TestOpenSinceSurvivesARestart trips a breaker and probes it, restarts
// the collector on the same database, and reads the same OpenSince from
// the restored live state before the agent reconnects.
func TestOpenSinceSurvivesARestart(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 42)
	trip := h.now().Truncate(time.Millisecond)
	a.send(h.batch(1, 10, 10, transAt(trip, protocol.StateClosed, protocol.StateOpen, 1)))
	a.send(h.batch(2, 0, 0, transAt(trip.Add(5*time.Second), protocol.StateOpen, protocol.StateHalfOpen, 1),
		transAt(trip.Add(6*time.Second), protocol.StateHalfOpen, protocol.StateOpen, 1)))
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	eventually.True(t, "three transitions stored", func() bool {
		trs, err := h.store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "api", Breaker: "db"})
		return err == nil && len(trs) == 3
	})
	if d, _ := h.col.live.Dependency(k); !d.OpenSince.Equal(trip) {
		t.Fatalf("live open since %v, want the trip %v", d.OpenSince, trip)
	}
	h.stop()

	h2 := startHarness(t, h.path, h.restartOpts)
	d, ok := h2.col.live.Dependency(k)
	if !ok || d.State != protocol.StateOpen || !d.OpenSince.Equal(trip) || len(d.PerInstance) != 1 || !d.PerInstance[0].OpenSince.Equal(trip) {
		t.Fatalf("restored: known %v state %q open since %v (per instance %+v), want open since the trip %v", ok, d.State, d.OpenSince, d.PerInstance, trip)
	}
}
