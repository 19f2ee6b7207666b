package collector

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// TestQuorumMeasureCallsIntoAFailingDependency measures, side by side in
// one run, the calls a fleet sends into a dependency that fails for every
// instance, with independent breakers and with quorum-advised trips: 10
// instances (3 busy at 50 calls a second, 7 quiet at 5), breakers of
// minimum calls 10, threshold 50 %, open 2 s, warmed with 10 successes
// each, then the dependency down for 6 s. Real time (paced calls), so it
// runs only with CBDASH_QUORUM_MEASURE=1:
//
//	CBDASH_QUORUM_MEASURE=1 go test -run TestQuorumMeasure -v ./internal/collector/
func TestQuorumMeasureCallsIntoAFailingDependency(t *testing.T) {
	if os.Getenv("CBDASH_QUORUM_MEASURE") == "" {
		t.Skip("a real-time measurement: set CBDASH_QUORUM_MEASURE=1")
	}
	const outage = 6 * time.Second
	without := measureOutage(t, nil, outage)
	with := measureOutage(t, quorumRules(t, "checkout/payments:q=30%,m=3"), outage)
	t.Logf("calls into the failing dependency over %v, 10 instances: independent %d (busy %d, quiet %d), quorum %d (busy %d, quiet %d): %.2fx fewer (quiet instances %.2fx)",
		outage, without.total(), without.busy, without.quiet, with.total(), with.busy, with.quiet,
		float64(without.total())/float64(max(with.total(), 1)), float64(without.quiet)/float64(max(with.quiet, 1)))
	if with.total() >= without.total() {
		t.Errorf("quorum %d calls, independent %d: want fewer", with.total(), without.total())
	}
}

type outageCalls struct{ busy, quiet int64 }

func (o outageCalls) total() int64 { return o.busy + o.quiet }

// measureOutage runs the fleet against a dependency down for outage and
// returns the calls its breakers admitted meanwhile (calls into it).
func measureOutage(t *testing.T, rules []cbdash.QuorumRule, outage time.Duration) outageCalls {
	t.Helper()
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk; c.Quorum = rules })
	f := startQuorumFleet(t, h, clk, 10, 2*time.Second, "payments")
	before := make([]uint64, len(f.members))
	for i, m := range f.members {
		before[i] = m.breakers["payments"].Snapshot().Totals.Admitted
	}
	ctx, cancel := context.WithTimeout(context.Background(), outage)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range f.members {
		every := 200 * time.Millisecond // quiet: 5 calls a second
		if i < 3 {
			every = 20 * time.Millisecond // busy: 50
		}
		br := m.breakers["payments"]
		wg.Go(func() { drivePaced(ctx, br, every) })
	}
	wg.Wait()
	var out outageCalls
	for i, m := range f.members {
		n := int64(m.breakers["payments"].Snapshot().Totals.Admitted - before[i])
		if i < 3 {
			out.busy += n
		} else {
			out.quiet += n
		}
	}
	for _, m := range f.members {
		m.close(t)
	}
	h.stop()
	return out
}

// drivePaced calls br every interval with a call that fails, until ctx
// ends.
func drivePaced(ctx context.Context, br *breaker.Breaker, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_ = br.ExecuteWithFallback(ctx, func(context.Context) error { return errDown },
				func(context.Context, error) error { return nil })
		}
	}
}
