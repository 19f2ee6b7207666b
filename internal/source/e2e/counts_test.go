package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/afex/hystrix-go/hystrix"

	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// calls is a run's traffic: when each call starts (from the run's start)
// and whether it fails.
type call struct {
	at   time.Duration
	fail bool
}

// steadyCalls: 20 calls a second for d, one in ten failing, and every
// call failing from outage for 20 s (the circuit opens, short-circuits
// for its sleep windows and closes once the outage is over).
func steadyCalls(d, outage time.Duration) (cs []call) {
	i := 0
	for at := 13 * time.Millisecond; at < d; at += 50 * time.Millisecond {
		cs = append(cs, call{at, i%10 == 9 || (at >= outage && at < outage+20*time.Second)})
		i++
	}
	return cs
}

// burstyCalls: bursts of 20-150 calls 5 ms apart (up to 0.75 s), 2.5-7.5
// s apart (5 s on average), for d, one call in ten failing.
func burstyCalls(d time.Duration, seed uint64) (cs []call) {
	rng := rand.New(rand.NewPCG(seed, seed))
	i := 0
	for at := 2 * time.Second; at < d; at += time.Duration((0.5 + rng.Float64()) * float64(5*time.Second)) {
		for j := range 20 + rng.IntN(131) {
			cs = append(cs, call{at + time.Duration(j)*5*time.Millisecond, i%10 == 9})
			i++
		}
	}
	return cs
}

var errDown = errors.New("dependency down")

// runCounts runs calls through a hystrix-go command whose stream, started
// phase into a second of hystrix-go's clock, cbdash's source reads; it
// returns the windows the source sent and hystrix-go's own totals. Run in
// a synctest bubble.
// The calls no record showed (libraryTotals.unseen) are returned apart.
func runCounts(t *testing.T, command string, phase time.Duration, calls []call) (ws []protocol.Window, lib, unseen protocol.Counts, bySecond map[int64]int64, begin time.Time) {
	t.Helper()
	countTotals()
	hystrix.ConfigureCommand(command, hystrix.CommandConfig{Timeout: 1000, MaxConcurrentRequests: 100,
		RequestVolumeThreshold: 20, SleepWindow: 5000, ErrorPercentThreshold: 50})
	start := time.Now() // the bubble's: 2000-01-01 00:00:00 UTC
	// The circuit exists before the stream starts, so the stream reports
	// it from its first tick (0 calls).
	if _, _, err := hystrix.GetCircuit(command); err != nil {
		t.Fatal(err)
	}
	bubbletest.Advance(phase)
	sh := hystrix.NewStreamHandler()
	sh.Start()
	sink := &recordingSink{}
	src, err := source.New(source.Config{Sink: sink, Client: &http.Client{Transport: handlerTransport{sh}}, Targets: []source.Target{{
		Kind: source.KindHystrix, URL: "http://hystrix-go.test/hystrix.stream", Service: "users", Instance: "users-1",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	bubbletest.Advance(2*time.Second - phase) // the source connected and read the empty window

	for _, c := range calls {
		if d := time.Until(start.Add(2*time.Second + c.at)); d > 0 {
			bubbletest.Advance(d)
		}
		_ = hystrix.Do(command, func() error {
			if c.fail {
				return errDown
			}
			return nil
		}, func(error) error { return nil })
	}
	bubbletest.Advance(15 * time.Second) // every call left the rolling window
	cancel()
	if err := <-done; err != nil {
		t.Errorf("source: %v", err)
	}
	sh.Stop()
	lib, bySecond = totalsOf(command).get()
	unseen = totalsOf(command).unseen(start.Add(phase + time.Second)) // the stream's first tick
	endCircuits(t, command)
	synctest.Wait()
	if s := src.Status()[0]; s.Refused != 0 || s.Dropped != 0 {
		t.Errorf("source status %+v, want nothing refused or dropped", s)
	}
	return sink.of(command), lib, unseen, bySecond, start.Add(2 * time.Second)
}

func sumCounts(ws []protocol.Window) (c protocol.Counts) {
	for _, w := range ws {
		c.Add(w.Counts)
	}
	return c
}

// checkTotals checks each count of got within tol of hystrix-go's own
// (lib), or as far below as the calls no record showed (unseen: see
// libraryTotals.unseen), which cbdash can estimate at best.
func checkTotals(t *testing.T, what string, got, lib, unseen protocol.Counts, tol float64) {
	t.Helper()
	for _, f := range []struct {
		name             string
		got, lib, unseen int64
	}{{"successes", got.Successes, lib.Successes, unseen.Successes}, {"failures", got.Errors, lib.Errors, unseen.Errors},
		{"timeouts", got.Timeouts, lib.Timeouts, unseen.Timeouts}, {"short-circuited", got.RejectedOpen, lib.RejectedOpen, unseen.RejectedOpen},
		{"rejected", got.RejectedBulkhead, lib.RejectedBulkhead, unseen.RejectedBulkhead},
		{"fallback successes", got.FallbackSuccess, lib.FallbackSuccess, unseen.FallbackSuccess},
		{"fallback failures", got.FallbackFailure, lib.FallbackFailure, unseen.FallbackFailure}} {
		off := 0.0
		if f.lib > 0 {
			off = float64(f.got-f.lib) / float64(f.lib)
		}
		unseenSaid := ""
		if f.unseen > 0 {
			unseenSaid = fmt.Sprintf(", %d of them in no record", f.unseen)
		}
		t.Logf("%s: %s %d, hystrix-go's own %d%s (%+.2f%%)", what, f.name, f.got, f.lib, unseenSaid, 100*off)
		slack := max(tol*float64(f.lib), 1)
		if d := float64(f.got - f.lib); d > slack || d < -slack-float64(f.unseen) {
			t.Errorf("%s: %s %d, hystrix-go counted %d%s (%+.2f%%), want within %.0f%%", what, f.name, f.got, f.lib, unseenSaid, 100*off, 100*tol)
		}
	}
}

// Five minutes of a real hystrix-go command's calls, read from its own
// StreamHandler by cbdash's source: steady calls (20 a second, one in ten
// failing, a 20 s outage that opens and closes the circuit) and bursts
// (20-150 calls over up to 0.75 s, every 5 s on average; 3 seeds), each
// read at six phases of the stream's tick against hystrix-go's
// one-second buckets. Against hystrix-go's own counts (a metric collector
// it feeds every call's result), less the calls no record showed (those
// between a record and hystrix-go clearing its counts as its circuit
// closes): steady calls within 2%, every count (measured: 0.5% at most),
// and no read shows steady successes at more than twice their rate
// (measured: 23 a second at most, of 18); bursts within 3% (measured:
// successes 2.6%, failures and fallbacks 1.7% at most). Counts of 2 a
// second cannot be told within 2% for every history of steady calls
// (TestHystrixGoStreamCannotTellSteadyHistoriesApart): cbdash takes
// steady calls as steady.
func TestHystrixGoCountsAddUp(t *testing.T) {
	const run = 5 * time.Minute
	for _, phase := range []time.Duration{40 * time.Millisecond, 150 * time.Millisecond, 370 * time.Millisecond, 560 * time.Millisecond, 720 * time.Millisecond, 950 * time.Millisecond} {
		t.Run(fmt.Sprintf("steady, stream %v into the second", phase), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				command := fmt.Sprintf("steady-%v", phase)
				outage := 120 * time.Second
				ws, lib, unseen, bySecond, begin := runCounts(t, command, phase, steadyCalls(run, outage))
				if lib.RejectedOpen == 0 {
					t.Fatalf("the outage did not open the circuit: %+v", lib)
				}
				checkTotals(t, "steady calls", sumCounts(ws), lib, unseen, 0.02)
				// Away from the outage (the circuit's own counts are
				// cleared when it closes), each read shows the successes
				// of its second.
				var most float64
				for _, w := range ws {
					at := time.UnixMilli(w.Start).Sub(begin)
					if at < 2*time.Second || at > run-2*time.Second || (at > outage-2*time.Second && at < outage+40*time.Second) {
						continue
					}
					rate := float64(w.Counts.Successes) / (float64(w.Millis) / 1000)
					most = max(most, rate)
					if true18 := 18.0; rate > 2*true18 {
						t.Errorf("a read %v into the run showed %.0f successes a second, more than twice the 18 a second made", at, rate)
					}
				}
				secs := 0
				for _, n := range bySecond {
					if n >= 17 {
						secs++
					}
				}
				t.Logf("steady calls: at most %.1f successes a second shown (18 a second made, in %d whole seconds)", most, secs)
			})
		})
		for seed := uint64(phase); seed < uint64(phase)+3; seed++ {
			t.Run(fmt.Sprintf("bursty, stream %v into the second, seed %d", phase, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ws, lib, unseen, _, _ := runCounts(t, fmt.Sprintf("bursty-%v-%d", phase, seed), phase, burstyCalls(run, seed))
					checkTotals(t, "bursty calls", sumCounts(ws), lib, unseen, 0.03)
				})
			})
		}
	}
}
