package web

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// fleetOf makes n dependencies of 6 instances with varied states and
// sparklines.
func fleetOf(n int, now time.Time) ([]cbdash.Dependency, map[cbdash.DependencyKey]templates.Spark) {
	deps := make([]cbdash.Dependency, n)
	sparks := make(map[cbdash.DependencyKey]templates.Spark, n)
	states := []string{protocol.StateClosed, protocol.StateClosed, protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen}
	for i := range deps {
		st := states[i%len(states)]
		d := cbdash.Dependency{
			DependencyKey: cbdash.DependencyKey{Service: fmt.Sprintf("svc-%02d", i%40), Breaker: fmt.Sprintf("dep-%04d", i)},
			State:         st, ByState: map[string]int{st: 2, protocol.StateClosed: 4}, Instances: 6,
			Labels: map[string]string{"team": "t" + fmt.Sprint(i%7), "tier": "1"}, RequestRate: float64(i % 300),
			Headroom: protocol.Headroom{FailureRate: float64(i % 60), FailureRateThreshold: 50, SlowCallRate: float64(i % 30), SlowCallRateThreshold: 80},
			P99:      time.Duration(i%900) * time.Millisecond, OpensToday: i % 5,
		}
		if st == protocol.StateForcedOpen {
			d.Held = &cbdash.Hold{Action: protocol.ActionForceOpen, Actor: "otto", Reason: "drill", Until: now.Add(10 * time.Minute)}
		}
		deps[i] = d
		var pts []cbdash.Point
		for sec := range 600 {
			pts = append(pts, cbdash.Point{At: now.Add(time.Duration(sec-600) * time.Second), Counts: protocol.Counts{Admitted: int64(10 + i%50*sec/60), Failures: int64(sec % 4)}})
		}
		sparks[d.DependencyKey] = sparkOf(pts, now)
	}
	return deps, sparks
}

// BenchmarkOverview1000 renders the overview page for 1,000 breakers
// (filter, sort, view model and HTML): its first page of tilesPerPage
// tiles. Target: under 50 ms.
func BenchmarkOverview1000(b *testing.B) {
	now := clocktest.Epoch()
	deps, sparks := fleetOf(1000, now)
	page := templates.Page{Title: "Overview", User: "vera", Role: "viewer", LiveURL: "/live?view=overview"}
	var size int
	for b.Loop() {
		w := &countWriter{}
		f := parseFilter(nil)
		v := overviewModel(page, pageOf(pointers(deps), f), fleet(deps), f, sparks, nil, now)
		if err := templates.OverviewPage(v).Render(context.Background(), w); err != nil {
			b.Fatal(err)
		}
		size = w.n
	}
	b.ReportMetric(float64(size), "bytes/page")
}

// BenchmarkLiveBytes1000 measures what one overview client receives per
// second (its page of tiles) while 1,000 breakers each report once a
// second and the socket flushes 4 times a second.
func BenchmarkLiveBytes1000(b *testing.B) {
	now := clocktest.Epoch()
	deps, _ := fleetOf(1000, now)
	st := &nopHistory{}
	s := &Server{now: func() time.Time { return now }, sparks: newSparkCache(st, func() time.Time { return now })}
	o := &overviewLive{s: s, f: parseFilter(nil)}
	ctx := context.Background()
	ix := newFleetIndex()
	ix.reset(pointers(deps))
	if _, err := o.start(ctx, ix); err != nil {
		b.Fatal(err)
	}
	var sent int
	tick := 0
	for b.Loop() { // one iteration = one second of reports
		for q := range 4 {
			for i := q; i < len(deps); i += 4 {
				d := deps[i]
				d.RequestRate = float64((i + tick) % 300)
				d.Headroom.FailureRate = float64((i + tick) % 60)
				ix.apply(cbdash.Event{Kind: cbdash.EventDependency, Dependency: &d})
			}
			msg, err := o.flush(ctx)
			if err != nil {
				b.Fatal(err)
			}
			sent += len(msg)
		}
		tick++
	}
	b.ReportMetric(float64(sent)/float64(b.N), "bytes/s")
}

type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

var _ io.Writer = (*countWriter)(nil)

type nopHistory struct{}

func (nopHistory) History(context.Context, cbdash.HistoryQuery) ([]cbdash.Point, error) {
	return nil, nil
}
func (nopHistory) Transitions(context.Context, cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error) {
	return nil, nil
}
func (nopHistory) Commands(context.Context, cbdash.CommandQuery) ([]cbdash.Command, error) {
	return nil, nil
}

// depOf makes a dependency of n instances, a few of them open, half-open,
// forced or stale, each with a last window report.
func depOf(n int, now time.Time) cbdash.Dependency {
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}, State: protocol.StateOpen, Instances: n}
	for i := range n {
		st := protocol.StateClosed
		switch i % 97 {
		case 3:
			st = protocol.StateOpen
		case 5:
			st = protocol.StateHalfOpen
		case 7:
			st = protocol.StateForcedOpen
		}
		d.PerInstance = append(d.PerInstance, &cbdash.InstanceBreaker{
			Service: d.Service, Instance: fmt.Sprintf("checkout-%04d", i), Breaker: d.Breaker, State: st, Stale: i%211 == 0,
			LastSeen: now.Add(-time.Second), LastTransition: now.Add(-time.Duration(i) * time.Second),
			Config: &protocol.BreakerConfig{Name: d.Breaker, WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 20},
			Last: &protocol.Window{Breaker: d.Breaker, Millis: 1000, State: st, Counts: protocol.Counts{Admitted: 100, Successes: 100 - int64(i%9), Failures: int64(i % 9)},
				Headroom: protocol.Headroom{Calls: 100, Failures: int64(i % 9), MinimumCalls: 20, FailureRate: float64(i % 9), FailureRateThreshold: 50}},
		})
	}
	return d
}

// BenchmarkDependencyInstances1000 builds and renders the dependency
// page's header and instance table for a dependency of 1,000 instances:
// the first page (the odd ones first), and every instance (iall=1).
// Target: the page under 100 ms.
func BenchmarkDependencyInstances1000(b *testing.B) {
	now := clocktest.Epoch()
	d := depOf(1000, now)
	for _, tc := range []struct {
		name string
		pg   instancePaging
	}{{"first-page", instancePaging{Page: 1}}, {"all", instancePaging{All: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			var size int
			for b.Loop() {
				w := &countWriter{}
				v := templates.Dependency{Page: templates.Page{Title: d.String()}, Service: d.Service, Breaker: d.Breaker,
					Header: depHeader(d, nil, now), Instances: instanceTable(d, nil, now, tc.pg, nil)}
				if err := templates.DependencyPage(v).Render(context.Background(), w); err != nil {
					b.Fatal(err)
				}
				size = w.n
			}
			b.ReportMetric(float64(size), "bytes/page")
		})
	}
}
