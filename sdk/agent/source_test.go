package agent_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/adapter"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// foreign is a breaker of some other library as an adapter would show it:
// a Meter for counts and transitions, and no way to apply commands.
type foreign struct {
	*adapter.Meter
	state breaker.State
}

func (f *foreign) Describe() protocol.BreakerConfig {
	return protocol.BreakerConfig{Name: f.Name(), OpenDurationMillis: 30_000, Library: "acme/breaker v3",
		Settings: protocol.NewSettings(map[string]string{"Trips": "after 3 failures"})}
}

func (f *foreign) Snapshot() breaker.Snapshot { return f.Meter.Snapshot(f.state) }

var _ agent.Source = (*foreign)(nil)

func TestASourceIsDeclaredWithItsLibraryAndReportedLikeABreaker(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	src := &foreign{Meter: adapter.NewMeter("search", f.clock)}
	if err := f.agent.RegisterSource(src); err != nil {
		t.Fatal(err)
	}
	for _, o := range []breaker.Outcome{breaker.Success, breaker.Failure, breaker.Failure, breaker.Failure} {
		start := src.Begin()
		f.clock.Advance(20 * time.Millisecond)
		src.End(start, o)
	}
	src.state = breaker.Open
	src.Transition(breaker.Transition{From: breaker.Closed, To: breaker.Open,
		Cause: breaker.Cause{Kind: breaker.CauseKind(protocol.CauseLibraryRule), Window: breaker.WindowStats{Calls: 4, Failures: 3}}})
	src.Reject(adapter.RejectedOpen)
	waitFor(t, 5*time.Second, "the transition, pushed", func() bool { return len(f.col.transitions()) == 1 })
	tr := f.col.transitions()[0]
	if tr.Breaker != "search" || tr.To != protocol.StateOpen || tr.Cause.Kind != protocol.CauseLibraryRule || tr.Cause.WindowFailed != 3 || tr.Generation != 1 {
		t.Errorf("transition = %+v", tr)
	}
	// The new hello goes out before the first batch that names the source.
	bc := f.col.lastHello().Breakers[1]
	if bc.Name != "search" || bc.Library != "acme/breaker v3" || bc.Settings.String() != "Trips=after 3 failures" ||
		!bc.HoldsUnsupported || bc.OpenDurationMillis != 30_000 {
		t.Fatalf("declared = %+v", bc)
	}
	if f.col.lastHello().Breakers[0].HoldsUnsupported {
		t.Error("the sdk/breaker breaker is declared as not supporting holds")
	}

	f.tick()
	waitFor(t, 5*time.Second, "a window of the source", func() bool { return len(f.col.windows("search")) > 0 })
	counts, lat := f.col.sum("search")
	if want := (protocol.Counts{Admitted: 4, Successes: 1, Failures: 3, Errors: 3, RejectedOpen: 1}); counts != want {
		t.Errorf("counts = %+v, want %+v", counts, want)
	}
	if len(lat) != protocol.NumLatencyBuckets || lat[4] != 4 { // 20 ms <= 25 ms
		t.Errorf("latency = %v, want 4 calls in the 25 ms bucket", lat)
	}
	if w := f.col.windows("search"); w[len(w)-1].State != protocol.StateOpen {
		t.Errorf("last window state = %q", w[len(w)-1].State)
	}

	if err := f.col.sendJSON(protocol.Command{Type: protocol.TypeCommand, ID: "c1", Breaker: "search", Action: protocol.ActionForceOpen}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the command's result", func() bool { return len(f.col.results()) == 1 })
	r := f.col.results()[0]
	if r.OK || !strings.Contains(r.Error, "holds not supported") || !strings.Contains(r.Error, "acme/breaker v3") || r.State != protocol.StateOpen {
		t.Errorf("result = %+v, want a refusal saying holds are not supported, in state open", r)
	}
}

func TestRegisterSourceRefusesABadName(t *testing.T) {
	f := newFixture(t, fixtureOptions{noStart: true})
	err := f.agent.RegisterSource(&foreign{Meter: adapter.NewMeter(" ", nil)})
	if !errors.Is(err, agent.ErrInvalidConfig) || !strings.Contains(err.Error(), "breaker name") {
		t.Errorf("err = %v", err)
	}
	if err := f.agent.RegisterSource(&foreign{Meter: adapter.NewMeter("payments", nil)}); !errors.Is(err, agent.ErrDuplicateBreaker) {
		t.Errorf("duplicate: err = %v", err)
	}
}
