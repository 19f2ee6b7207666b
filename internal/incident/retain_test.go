package incident

import (
	"runtime"
	"testing"
	"weak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestWatchersDoNotKeepTheLastEventsLines: the detector and the config
// watch remember what they learned from the last dependency event, not
// its lines. A line's Last points into the batch of windows it came from,
// so keeping a view's lines kept a whole batch per instance alive after
// live state had moved on (at 1,000 x 20, megabytes of old windows).
func TestWatchersDoNotKeepTheLastEventsLines(t *testing.T) {
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	cfg := &protocol.BreakerConfig{Name: "payments", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50}
	event := func(state string) (cbdash.Event, weak.Pointer[protocol.Window]) {
		// Each line's window is its own allocation, as a decoded batch's
		// windows array would be; a weak pointer says when it is freed.
		lines := make([]*cbdash.InstanceBreaker, 3)
		var w weak.Pointer[protocol.Window]
		for i := range lines {
			win := &protocol.Window{Breaker: "payments", State: state}
			if i == 0 {
				w = weak.Make(win)
			}
			lines[i] = &cbdash.InstanceBreaker{Service: k.Service, Breaker: k.Breaker, Instance: string(rune('a' + i)), State: state, Config: cfg, Last: win}
		}
		return cbdash.Event{Kind: cbdash.EventDependency, At: clocktest.Epoch(), Dependency: &cbdash.Dependency{DependencyKey: k, Instances: len(lines), PerInstance: lines}}, w
	}
	d, err := NewDetector(Config{})
	if err != nil {
		t.Fatal(err)
	}
	cw := newConfigWatch()
	ev, w := event(protocol.StateClosed)
	d.Observe(ev)
	cw.observe(ev)
	kept, wk := event(protocol.StateClosed) // held by the test: must survive
	ev = cbdash.Event{}
	runtime.GC()
	runtime.GC() // a second cycle, in case the first one only marked
	if w.Value() != nil {
		t.Error("the last event's windows are still reachable once only the watchers have seen it: they keep its lines")
	}
	if wk.Value() == nil {
		t.Fatal("a window the test holds was freed: the check above proves nothing")
	}
	runtime.KeepAlive(kept)
	runtime.KeepAlive(d) // the watchers live on, as in the service
	runtime.KeepAlive(cw)
}
