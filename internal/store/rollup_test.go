package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// model is the expected history of one dependency: per second, the sums
// over instances, computed in the test independently of the store.
type model map[int64]*cbdash.Point // key: second start, Unix ms

func (m model) add(w protocol.Window) {
	sec := w.Start - w.Start%1000
	p := m[sec]
	if p == nil {
		p = &cbdash.Point{At: time.UnixMilli(sec).UTC(), Width: time.Second, Latency: make([]int64, protocol.NumLatencyBuckets)}
		m[sec] = p
	}
	p.Counts.Add(w.Counts)
	for i, v := range w.Latency {
		p.Latency[i] += v
	}
	p.LatencySumMs += w.LatencySumMs
	p.InFlight += w.InFlight
	if w.State != protocol.StateClosed {
		p.Open++
	}
}

// buckets rolls the model's seconds into buckets of width, the way the
// store must: sums of counts, maxima of in-flight and open.
func (m model) buckets(width time.Duration) map[int64]*cbdash.Point {
	out := make(map[int64]*cbdash.Point)
	w := width.Milliseconds()
	for sec, p := range m {
		b := sec - sec%w
		q := out[b]
		if q == nil {
			q = &cbdash.Point{At: time.UnixMilli(b).UTC(), Width: width, Latency: make([]int64, protocol.NumLatencyBuckets)}
			out[b] = q
		}
		q.Counts.Add(p.Counts)
		for i, v := range p.Latency {
			q.Latency[i] += v
		}
		q.LatencySumMs += p.LatencySumMs
		q.InFlight = max(q.InFlight, p.InFlight)
		q.Open = max(q.Open, p.Open)
	}
	return out
}

func randomWindow(r *rand.Rand, breaker string, start time.Time) protocol.Window {
	e, to, pa := r.Int64N(5), r.Int64N(3), r.Int64N(2)
	succ := r.Int64N(50)
	lat := make([]int64, protocol.NumLatencyBuckets)
	var sum float64
	for range succ + e + to + pa {
		i := r.IntN(protocol.NumLatencyBuckets)
		lat[i]++
		sum += float64(i * 7) // integral, so float sums are exact
	}
	states := []string{protocol.StateClosed, protocol.StateClosed, protocol.StateOpen, protocol.StateHalfOpen}
	return protocol.Window{Breaker: breaker, Start: start.UnixMilli() + r.Int64N(1000), Millis: 1000,
		State: states[r.IntN(len(states))],
		Counts: protocol.Counts{Admitted: succ + e + to + pa, Successes: succ, Failures: e + to + pa, Errors: e,
			Timeouts: to, Panics: pa, Slow: r.Int64N(4), Ignored: r.Int64N(2), RejectedOpen: r.Int64N(9),
			RejectedHalfOpen: r.Int64N(2), RejectedForced: r.Int64N(2), RejectedBulkhead: r.Int64N(3),
			FallbackSuccess: r.Int64N(3), FallbackFailure: r.Int64N(2)},
		InFlight: r.Int64N(10), Latency: lat, LatencySumMs: sum}
}

// feeder sends random reports for 2 dependencies from 3 instances.
type feeder struct {
	t      *testing.T
	s      *store.Store
	r      *rand.Rand
	seq    map[string]uint64
	models map[string]model // by breaker
}

// send reports the seconds in [from, to): each instance sends one batch
// per 10 seconds, the instances concurrently (so batches share
// transactions as in production).
func (f *feeder) send(from, to time.Time, density float64) {
	f.t.Helper()
	batches := map[string][]protocol.Batch{}
	for chunk := from; chunk.Before(to); chunk = chunk.Add(10 * time.Second) {
		for _, inst := range []string{"i1", "i2", "i3"} {
			var b protocol.Batch
			for sec := chunk; sec.Before(to) && sec.Before(chunk.Add(10*time.Second)); sec = sec.Add(time.Second) {
				for _, br := range []string{"db", "psp"} {
					if f.r.Float64() < density {
						w := randomWindow(f.r, br, sec)
						b.Windows = append(b.Windows, w)
						f.models[br].add(w)
					}
				}
			}
			if len(b.Windows) == 0 {
				continue
			}
			f.seq[inst]++
			b.Seq = f.seq[inst]
			batches[inst] = append(batches[inst], b)
		}
	}
	var wg sync.WaitGroup
	for inst, bs := range batches {
		wg.Go(func() {
			for _, b := range bs {
				stored, err := f.s.SaveBatch(context.Background(), "shop", inst, 1, b, t0)
				if err != nil || !stored {
					f.t.Errorf("batch %s/%d: stored=%v, err=%v", inst, b.Seq, stored, err)
				}
			}
		})
	}
	wg.Wait()
}

// check compares the store's history of every dependency at every
// resolution with the model, bucket by bucket.
func (f *feeder) check(from, to time.Time, resolutions ...cbdash.Resolution) {
	f.t.Helper()
	if len(resolutions) == 0 {
		resolutions = []cbdash.Resolution{cbdash.ResolutionSecond, cbdash.ResolutionMinute, cbdash.ResolutionHour}
	}
	widths := map[cbdash.Resolution]time.Duration{cbdash.ResolutionSecond: time.Second,
		cbdash.ResolutionMinute: time.Minute, cbdash.ResolutionHour: time.Hour}
	for br, m := range f.models {
		for _, r := range resolutions {
			res := struct {
				r cbdash.Resolution
				w time.Duration
			}{r, widths[r]}
			got, err := f.s.History(context.Background(), cbdash.HistoryQuery{
				DependencyKey: cbdash.DependencyKey{Service: "shop", Breaker: br}, From: from, To: to, Resolution: res.r})
			if err != nil {
				f.t.Fatalf("History %s %s: %v", br, res.r, err)
			}
			want := m.buckets(res.w)
			if len(got) != len(want) {
				f.t.Errorf("%s at %s: %d points, want %d", br, res.r, len(got), len(want))
			}
			for i, p := range got {
				if i > 0 && !got[i-1].At.Before(p.At) {
					f.t.Errorf("%s at %s: points out of order at %d", br, res.r, i)
				}
				if d := diffPoint(p, want[p.At.UnixMilli()]); d != "" {
					f.t.Errorf("%s at %s, bucket %v: %s", br, res.r, p.At, d)
				}
			}
		}
	}
}

func diffPoint(got cbdash.Point, want *cbdash.Point) string {
	if want == nil {
		return "unexpected bucket"
	}
	if got.Width != want.Width || got.Counts != want.Counts || got.LatencySumMs != want.LatencySumMs ||
		got.InFlight != want.InFlight || got.Open != want.Open || fmt.Sprint(got.Latency) != fmt.Sprint(want.Latency) {
		return fmt.Sprintf("got %+v\nwant %+v", got, *want)
	}
	return ""
}

func TestRollUpsKeepExactSumsWhateverTheArrivalOrder(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	f := &feeder{t: t, s: s, r: rand.New(rand.NewPCG(1, 2)), seq: map[string]uint64{},
		models: map[string]model{"db": {}, "psp": {}}}
	ctx := context.Background()
	end := t0.Add(3 * time.Hour)

	// Sparse reports over 2.5 hours, compacting as the collector would.
	f.send(t0, t0.Add(90*time.Minute), 0.05)
	if err := s.Compact(ctx, t0.Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.check(t0, end)
	f.send(t0.Add(90*time.Minute), t0.Add(150*time.Minute), 0.05)
	if err := s.Compact(ctx, t0.Add(150*time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.check(t0, end)

	// Late reports (agents resending after a reconnect) into seconds whose
	// minute and hour are already rolled up, and into the open minute.
	f.send(t0.Add(10*time.Minute), t0.Add(12*time.Minute), 0.5)
	f.send(t0.Add(70*time.Minute), t0.Add(71*time.Minute), 0.5)
	f.send(t0.Add(149*time.Minute), t0.Add(151*time.Minute), 0.5)
	f.check(t0, end)
	if err := s.Compact(ctx, t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	f.check(t0, end)
}

func TestRetentionDeletesEachLevelOnlyAfterRollUp(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{Retention: store.Retention{Seconds: time.Hour, Minutes: 3 * time.Hour, Hours: 24 * time.Hour}})
	f := &feeder{t: t, s: s, r: rand.New(rand.NewPCG(3, 4)), seq: map[string]uint64{},
		models: map[string]model{"db": {}, "psp": {}}}
	ctx := context.Background()
	f.send(t0, t0.Add(20*time.Minute), 0.2)
	end := t0.Add(25 * time.Hour)
	points := func(res cbdash.Resolution) int {
		t.Helper()
		p, err := s.History(ctx, cbdash.HistoryQuery{DependencyKey: cbdash.DependencyKey{Service: "shop", Breaker: "db"},
			From: t0, To: end, Resolution: res})
		if err != nil {
			t.Fatal(err)
		}
		return len(p)
	}
	compact := func(now time.Time) {
		t.Helper()
		if err := s.Compact(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	// Retention passed for seconds but no roll-up yet: nothing may go.
	// (Compact rolls up first, so check the raw level before any.)
	compact(t0.Add(2 * time.Hour))
	if n := points(cbdash.ResolutionSecond); n != 0 {
		t.Errorf("seconds after their retention: %d points, want 0", n)
	}
	f.check(t0, end, cbdash.ResolutionMinute, cbdash.ResolutionHour)

	compact(t0.Add(5 * time.Hour))
	if n := points(cbdash.ResolutionMinute); n != 0 {
		t.Errorf("minutes after their retention: %d points, want 0", n)
	}
	f.check(t0, end, cbdash.ResolutionHour)

	compact(t0.Add(25 * time.Hour))
	if n := points(cbdash.ResolutionHour); n != 0 {
		t.Errorf("hours after their retention: %d points, want 0", n)
	}
}
