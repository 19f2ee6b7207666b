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
// (filter, sort, view model and HTML). Target: under 50 ms.
func BenchmarkOverview1000(b *testing.B) {
	now := clocktest.Epoch()
	deps, sparks := fleetOf(1000, now)
	page := templates.Page{Title: "Overview", User: "vera", Role: "viewer", LiveURL: "/live?view=overview"}
	var size int
	for b.Loop() {
		w := &countWriter{}
		v := overviewModel(page, deps, parseFilter(nil), sparks, nil, now)
		if err := templates.OverviewPage(v).Render(context.Background(), w); err != nil {
			b.Fatal(err)
		}
		size = w.n
	}
	b.ReportMetric(float64(size), "bytes/page")
}

// BenchmarkLiveBytes1000 measures what one overview client receives per
// second while 1,000 breakers each report once a second (every tile's
// numbers change) and the socket flushes 4 times a second.
func BenchmarkLiveBytes1000(b *testing.B) {
	now := clocktest.Epoch()
	deps, _ := fleetOf(1000, now)
	st := &nopHistory{}
	s := &Server{now: func() time.Time { return now }, sparks: newSparkCache(st, func() time.Time { return now })}
	o := &overviewLive{s: s, f: parseFilter(nil)}
	ctx := context.Background()
	if _, err := o.reset(ctx, deps); err != nil {
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
				o.event(cbdash.Event{Kind: cbdash.EventDependency, Dependency: &d})
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
