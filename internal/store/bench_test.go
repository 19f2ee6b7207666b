package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// BenchmarkSaveBatch measures window reports a second through the writer
// for the target fleet: 1,000 instances (10 services of 100) with
// 20 breakers each, every instance sending one batch of 20 reports per
// second of data, all concurrently as the collector's connections would.
// One op is one batch (20 reports); windows/s is the figure to read.
func BenchmarkSaveBatch(b *testing.B) {
	s, _ := openStore(b, store.Options{})
	const instances, breakers = 1000, 20
	names := make([]string, breakers)
	for i := range names {
		names[i] = fmt.Sprintf("dep-%d", i)
	}
	batch := func(seq uint64) protocol.Batch {
		start := t0.Add(time.Duration(seq) * time.Second)
		ws := make([]protocol.Window, breakers)
		for i := range ws {
			ws[i] = window(names[i], start, protocol.StateClosed, 20, 1)
		}
		return protocol.Batch{Seq: seq, Windows: ws}
	}
	instance := func(id int64) (svc, inst string) {
		svc = fmt.Sprintf("svc-%d", id%10)
		return svc, fmt.Sprintf("%s-%d", svc, id)
	}
	// The fleet has said hello and sent its first second (breaker rows and
	// states exist, as in steady state).
	var wg sync.WaitGroup
	for id := range int64(instances) {
		wg.Go(func() {
			svc, inst := instance(id)
			if err := s.SaveHello(context.Background(), hello(svc, inst, 1, names...), t0); err != nil {
				b.Error(err)
			}
			mustSave(b, s, svc, inst, 1, batch(1))
		})
	}
	wg.Wait()
	var next atomic.Int64
	b.SetParallelism(instances / max(1, testingProcs()))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		svc, inst := instance((next.Add(1) - 1) % instances)
		seq := uint64(1)
		for pb.Next() {
			seq++
			bt := batch(seq)
			if _, err := s.SaveBatch(context.Background(), svc, inst, 1, bt, t0); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*breakers)/b.Elapsed().Seconds(), "windows/s")
}

// BenchmarkHistory24h measures the dashboard's 24 h query of one breaker at
// minute resolution, over 24 h of per-second data rolled up by Compact.
func BenchmarkHistory24h(b *testing.B) {
	s, _ := openStore(b, store.Options{})
	ctx := context.Background()
	for h := range 24 {
		ws := make([]protocol.Window, 0, 3600)
		for sec := range 3600 {
			ws = append(ws, window("db", t0.Add(time.Duration(h*3600+sec)*time.Second), protocol.StateClosed, 20, 1))
		}
		mustSave(b, s, "pay", "pay-1", 1, protocol.Batch{Seq: uint64(h + 1), Windows: ws})
	}
	end := t0.Add(24 * time.Hour)
	if err := s.Compact(ctx, end.Add(time.Minute)); err != nil {
		b.Fatal(err)
	}
	q := cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: end}
	b.ResetTimer()
	for b.Loop() {
		p, err := s.History(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		if len(p) != 1440 || p[0].Width != time.Minute {
			b.Fatalf("%d points of %v, want 1440 minutes", len(p), p[0].Width)
		}
	}
}

// BenchmarkFleetNotClosedHour: the overview's fleet timeline, the last
// hour of per-instance minutes of a fleet of 1,000 instances x 20
// breakers (1.2 million rows), 1% of them open (one dependency's
// instances for 12 minutes), written to the table as the writer does once
// their minutes have ended (FlushInstanceMinutes writes them at once).
func BenchmarkFleetNotClosedHour(b *testing.B) {
	s, _ := openStore(b, store.Options{})
	ctx := context.Background()
	const instances, deps, minutes = 1000, 20, 60
	names := make([]string, deps)
	for d := range names {
		names[d] = fmt.Sprintf("dep-%02d", d)
	}
	for i := range instances {
		inst := fmt.Sprintf("i-%04d", i)
		if err := s.SaveHello(ctx, hello("fleet", inst, 1, names...), t0); err != nil {
			b.Fatal(err)
		}
		ws := make([]protocol.Window, 0, deps*minutes)
		for m := range minutes {
			for d, n := range names {
				state := protocol.StateClosed
				if d == 0 && m >= 30 && m < 42 {
					state = protocol.StateOpen
				}
				ws = append(ws, window(n, t0.Add(time.Duration(m)*time.Minute), state, 20, 1))
			}
		}
		mustSave(b, s, "fleet", inst, 1, protocol.Batch{Seq: 1, Windows: ws})
	}
	if err := store.FlushInstanceMinutes(s); err != nil {
		b.Fatal(err)
	}
	from, to := t0, t0.Add(minutes*time.Minute)
	check := func() {
		got, err := s.FleetNotClosed(ctx, from, to)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != 12 || got[0].Instances != instances || got[0].Dependencies != 1 {
			b.Fatalf("%d minutes, the first %+v; want 12 of %d instances on 1 dependency", len(got), got[0], instances)
		}
	}
	check()
	b.ResetTimer()
	for b.Loop() {
		check()
	}
}

// BenchmarkApplyHoldChunk measures one chunk of a fleet-wide hold, as
// the hold manager writes it (250 instances, one breaker each: the
// command once, a pending target and a coverage row each), in one
// ApplyHold: a hello's record waits behind such a write. One op is one
// chunk, each of a hold of its own.
func BenchmarkApplyHoldChunk(b *testing.B) {
	s, _ := openStore(b, store.Options{})
	ctx := context.Background()
	const instances = 250
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		h := cbdash.HoldRecord{ID: fmt.Sprintf("h%06d", i), HoldRequest: cbdash.HoldRequest{
			Selector: cbdash.Selector{Service: "fleet", Breaker: "db"}, Action: protocol.ActionForceOpen, TTL: time.Hour,
			Reason: "drill", Actor: "bench"}, CreatedAt: t0, Until: t0.Add(time.Hour)}
		if err := s.CreateHold(ctx, h); err != nil {
			b.Fatal(err)
		}
		cmd := cbdash.Command{ID: h.ID + "-fleet", HoldID: h.ID, IssuedAt: t0, ExpiresAt: h.Until,
			CommandRequest: cbdash.CommandRequest{Service: "fleet", Breaker: "db", Action: protocol.ActionForceOpen,
				TTL: time.Hour, Reason: "drill", Actor: "bench"}}
		ds := make([]cbdash.HoldDelivery, instances)
		for j := range ds {
			inst := fmt.Sprintf("f-%04d", j)
			ds[j] = cbdash.HoldDelivery{Command: cmd, Target: cbdash.CommandTarget{Instance: inst, Status: cbdash.TargetPending},
				Coverage: &cbdash.HoldCoverage{Service: "fleet", Instance: inst, Breaker: "db", StartedAt: 1,
					CommandID: cmd.ID, CoveredAt: t0}}
		}
		b.StartTimer()
		if err := s.ApplyHold(ctx, ds); err != nil {
			b.Fatal(err)
		}
	}
}
