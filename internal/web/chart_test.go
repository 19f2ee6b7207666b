package web

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestPercentileInterpolatesInTheBucket(t *testing.T) {
	t.Parallel()
	h := make([]int64, protocol.NumLatencyBuckets)
	h[3] = 50 // (5, 10] ms
	h[6] = 50 // (50, 100] ms
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.25, 7.5}, {0.5, 10}, {0.75, 75}, {0.99, 99}} {
		if got := percentile(h, tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("p%v = %v, want %v", tc.q*100, got, tc.want)
		}
	}
	if got := percentile(make([]int64, protocol.NumLatencyBuckets), 0.5); !math.IsNaN(got) {
		t.Errorf("empty histogram: %v, want NaN", got)
	}
	over := make([]int64, protocol.NumLatencyBuckets)
	over[len(over)-1] = 1
	if got := percentile(over, 0.99); got != 10000 {
		t.Errorf("overflow bucket: %v, want the last bound", got)
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.2: 2, 2.2: 2.5, 3: 5, 7: 10, 57.5: 100, 120: 200} {
		if got := niceCeil(in); math.Abs(got-want) > 1e-9 {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestChartsFromHistory(t *testing.T) {
	t.Parallel()
	from := clocktest.Epoch().Truncate(time.Hour) // x ticks fall on round times
	to := from.Add(10 * time.Minute)
	lat := make([]int64, protocol.NumLatencyBuckets)
	lat[4] = 60
	pt := func(min int, ok, failed int64, open int) cbdash.Point {
		return cbdash.Point{At: from.Add(time.Duration(min) * time.Minute), Width: time.Minute, Latency: lat, Open: open,
			Counts: protocol.Counts{Admitted: ok + failed, Successes: ok, Failures: failed, Errors: failed}}
	}
	// Minutes 0-2 and 5, nothing in between: a gap.
	pts := []cbdash.Point{pt(0, 60, 0, 0), pt(1, 30, 30, 1), pt(2, 60, 0, 0), pt(5, 0, 60, 2)}
	d := cbdash.Dependency{PerInstance: []*cbdash.InstanceBreaker{{Config: &protocol.BreakerConfig{FailureRateThreshold: 50}, Last: &protocol.Window{}}}, Instances: 3}
	charts := dependencyCharts(pts, from, to, d)
	if len(charts) != 5 {
		t.Fatalf("%d charts", len(charts))
	}
	req, rates, open := charts[0], charts[1], charts[4]
	if req.Unit != "calls/s" || rates.Unit != "%" || open.Unit != "instances" {
		t.Errorf("units %q %q %q", req.Unit, rates.Unit, open.Unit)
	}
	// successes: minutes 0..2 connected, minute 5 alone (a dash).
	if parts := req.Series[0].Parts; len(parts) != 2 || strings.Count(parts[0], ",") != 3 || strings.Count(parts[1], ",") != 2 {
		t.Errorf("successes parts %q", parts)
	}
	if len(rates.Thresholds) != 1 || rates.Thresholds[0].Label != "failure threshold 50%" {
		t.Fatalf("thresholds %+v", rates.Thresholds)
	}
	// y axis 0..100 (50% threshold, 100% failure at minute 5): the threshold is half way.
	mid := (chartTop + chartBottom) / 2
	if y := rates.Thresholds[0].Y; math.Abs(y-mid) > 0.01 {
		t.Errorf("threshold at y=%v, want %v", y, mid)
	}
	if len(req.Hover) != 10 || !strings.Contains(req.Hover[1].Title, "successes: 0.50 calls/s") || !strings.Contains(req.Hover[1].Title, "failures: 0.50 calls/s") {
		t.Errorf("hover %d, second %q", len(req.Hover), req.Hover[1].Title)
	}
	if len(req.XTicks) == 0 || req.XTicks[0].Label != from.Format("15:04") {
		t.Errorf("x ticks %+v", req.XTicks)
	}
	if open.YTicks[4].Label != "5" { // at least the 3 instances: nice 5
		t.Errorf("open chart y max %q", open.YTicks[4].Label)
	}
	empty := dependencyCharts(nil, from, to, d)
	if !empty[0].Empty {
		t.Error("no history is not shown as empty")
	}
}

// minutesAgo formats the time minAgo minutes before now as the timeline does.
func minutesAgo(now time.Time, minAgo int) string {
	return now.Add(-time.Duration(minAgo) * time.Minute).UTC().Format("15:04:05")
}

func TestTimelineLanesReplayTransitions(t *testing.T) {
	t.Parallel()
	now := clocktest.Epoch()
	sp := span{name: "1h", from: now.Add(-time.Hour), to: now}
	tr := func(svc, br, inst string, minAgo int, from, to string) cbdash.TransitionRecord {
		return cbdash.TransitionRecord{Service: svc, Instance: inst, Transition: protocol.Transition{
			Breaker: br, From: from, To: to, At: now.Add(-time.Duration(minAgo) * time.Minute).UnixMilli()}}
	}
	recs := []cbdash.TransitionRecord{ // newest first, as the store returns them
		tr("checkout", "payments", "c-2", 20, protocol.StateOpen, protocol.StateClosed),
		tr("checkout", "payments", "c-1", 30, protocol.StateOpen, protocol.StateClosed),
		tr("checkout", "payments", "c-2", 40, protocol.StateClosed, protocol.StateOpen),
		tr("checkout", "payments", "c-1", 45, protocol.StateClosed, protocol.StateOpen),
		tr("search", "index", "s-1", 10, protocol.StateClosed, protocol.StateHalfOpen),
	}
	deps := []cbdash.Dependency{dep2("checkout", "payments", 3), dep2("checkout", "stock", 2), dep2("search", "index", 1)}
	lanes, quiet := lanes(recs, deps, "", sp, now, nil)
	if len(lanes) != 2 || quiet != 1 {
		t.Fatalf("%d lanes, %d quiet", len(lanes), quiet)
	}
	pay := lanes[0]
	if pay.Title != "checkout/payments" || len(pay.Segments) != 3 {
		t.Fatalf("first lane %q with %d segments", pay.Title, len(pay.Segments))
	}
	for i, want := range []string{
		"open on 1 of 3 · " + minutesAgo(now, 45) + "–" + minutesAgo(now, 40) + " UTC",
		"open on 2 of 3 · " + minutesAgo(now, 40) + "–" + minutesAgo(now, 30) + " UTC",
		"open on 1 of 3 · " + minutesAgo(now, 30) + "–" + minutesAgo(now, 20) + " UTC",
	} {
		if pay.Segments[i].Title != want {
			t.Errorf("segment %d %q, want %q", i, pay.Segments[i].Title, want)
		}
	}
	if x := pay.Segments[0].X; math.Abs(x-timelineW*15/60) > 0.01 {
		t.Errorf("first segment at x=%v", x)
	}
	if s := lanes[1].Segments; len(s) != 1 || s[0].Class != "half-open" || !strings.Contains(s[0].Title, minutesAgo(now, 10)+"–"+minutesAgo(now, 0)) {
		t.Errorf("search lane %+v", s)
	}
}

func TestTimelineLaneEndsWhereReportsOfNotClosedStop(t *testing.T) {
	t.Parallel()
	// c-1 opened 50 minutes ago and then stopped reporting 45 minutes ago
	// (its process died while open); it came back 10 minutes ago and
	// closed 5 minutes ago. The lane shows open only while it reported so.
	now := clocktest.Epoch()
	sp := span{name: "1h", from: now.Add(-time.Hour), to: now}
	at := func(minAgo int) time.Time { return now.Add(-time.Duration(minAgo) * time.Minute) }
	recs := []cbdash.TransitionRecord{
		{Service: "checkout", Instance: "c-1", Transition: protocol.Transition{Breaker: "payments", From: protocol.StateOpen, To: protocol.StateClosed, At: at(5).UnixMilli()}},
		{Service: "checkout", Instance: "c-1", Transition: protocol.Transition{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen, At: at(50).UnixMilli()}},
	}
	var pts []cbdash.Point
	for m := 50; m > 5; m-- {
		if m > 45 || m <= 10 {
			pts = append(pts, cbdash.Point{At: at(m), Width: time.Minute, Open: 1})
		}
	}
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	alive := map[cbdash.DependencyKey][]interval{k: openStretches(pts, now)}
	ls, _ := lanes(recs, []cbdash.Dependency{dep2("checkout", "payments", 1)}, "", sp, now, alive)
	if len(ls) != 1 {
		t.Fatalf("%d lanes", len(ls))
	}
	var got []string
	for _, s := range ls[0].Segments {
		got = append(got, s.Title)
	}
	want := []string{"open on 1 of 1 · " + minutesAgo(now, 50) + "–" + minutesAgo(now, 45) + " UTC", "open on 1 of 1 · " + minutesAgo(now, 10) + "–" + minutesAgo(now, 5) + " UTC"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("segments %q, want %q", got, want)
	}
	// Without the reports the lane would stay open through the gap.
	ls, _ = lanes(recs, []cbdash.Dependency{dep2("checkout", "payments", 1)}, "", sp, now, nil)
	if len(ls[0].Segments) != 1 || !strings.Contains(ls[0].Segments[0].Title, minutesAgo(now, 50)+"–"+minutesAgo(now, 5)) {
		t.Errorf("unmasked lane %+v", ls[0].Segments)
	}
}

func dep2(svc, br string, n int) cbdash.Dependency {
	d := cbdash.Dependency{DependencyKey: cbdash.DependencyKey{Service: svc, Breaker: br}, State: protocol.StateClosed, Instances: n}
	for i := range n {
		d.PerInstance = append(d.PerInstance, &cbdash.InstanceBreaker{Instance: fmt.Sprintf("%c-%d", svc[0], i+1), State: protocol.StateClosed})
	}
	return d
}

func TestSparklineDrawsAdmittedFailedAndRejectedApart(t *testing.T) {
	t.Parallel()
	// 4 s into a 10-second bucket: the sparkline covers the 60 whole
	// buckets (10 minutes) before it.
	now := clocktest.Epoch().Truncate(time.Minute).Add(44 * time.Second)
	start := now.Truncate(10 * time.Second).Add(-10 * time.Minute)
	pt := func(sec int, admitted, failed, rejected int64) cbdash.Point {
		return cbdash.Point{At: start.Add(time.Duration(sec) * time.Second), Width: time.Second,
			Counts: protocol.Counts{Admitted: admitted, Failures: failed, Errors: failed, Successes: admitted - failed, RejectedOpen: rejected}}
	}
	// Calm, then an outage: the breaker rejects what it no longer admits.
	s := sparkOf([]cbdash.Point{
		pt(-1, 999, 0, 0), pt(0, 50, 0, 0), pt(5, 50, 0, 0), // bucket 0: 100 admitted
		pt(580, 10, 10, 40), pt(589, 0, 0, 60), // bucket 58: 10 admitted, all failed, 100 rejected
		pt(600, 5, 0, 0), // the current bucket: not drawn
	}, now)
	if s.Empty {
		t.Fatal("empty")
	}
	adm, fail, rej := strings.Fields(s.Admitted), strings.Fields(s.Failed), strings.Fields(s.Rejected)
	if len(adm) != 60 || len(fail) != 60 || len(rej) != 60 {
		t.Fatalf("%d, %d, %d points, want 60 buckets each", len(adm), len(fail), len(rej))
	}
	// One scale, the busiest bucket (100): y = 23 - 22*v/100.
	for _, c := range []struct{ name, got, want string }{
		{"admitted, first bucket", adm[0], "0.0,1.0"},
		{"admitted in the outage", adm[58], "98.3,20.8"},
		{"failed in the outage", fail[58], "98.3,20.8"},
		{"rejected in the outage", rej[58], "98.3,1.0"},
		{"rejected while calm", rej[0], "0.0,23.0"},
		{"last complete bucket", adm[59], "100.0,23.0"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	if want := "last 10 min, per 10 s: 110 admitted, 10 failed, 100 rejected; peak 100 per 10 s"; s.Title != want {
		t.Errorf("title %q, want %q", s.Title, want)
	}
	if !sparkOf(nil, now).Empty {
		t.Error("no history is not empty")
	}
}
