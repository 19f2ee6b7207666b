package source

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
)

// goNumber is hystrix-go's rolling.Number (hystrix/rolling/rolling.go at
// fa1af6a), ported: buckets by second of the clock; an increment deletes
// the buckets 10 s old and older; the sum adds the buckets at most 10 s
// old, the current one included. The real one is tested against in
// internal/source/e2e; this port lets the unit tests run minutes of
// traffic at many read phases in milliseconds.
type goNumber map[int64]float64

func (r goNumber) inc(now time.Time) {
	s := now.Unix()
	r[s]++
	for ts := range r {
		if ts <= s-10 {
			delete(r, ts)
		}
	}
}

func (r goNumber) sum(now time.Time) float64 {
	var t float64
	for ts, v := range r {
		if ts >= now.Unix()-10 {
			t += v
		}
	}
	return t
}

// traffic is the times of a run's calls.
type traffic func(rng *rand.Rand, base time.Time, d time.Duration) []time.Time

var trafficKinds = map[string]traffic{
	// 20 calls a second, 50 ms apart
	"steady": func(_ *rand.Rand, base time.Time, d time.Duration) (ts []time.Time) {
		for x := 13 * time.Millisecond; x < d; x += 50 * time.Millisecond {
			ts = append(ts, base.Add(x))
		}
		return ts
	},
	// 20 calls a second on average, at random (Poisson)
	"random": func(rng *rand.Rand, base time.Time, d time.Duration) (ts []time.Time) {
		for x := time.Duration(0); x < d; x += time.Duration(rng.ExpFloat64() * float64(50*time.Millisecond)) {
			ts = append(ts, base.Add(x))
		}
		return ts
	},
	// bursts of 20-150 calls 5 ms apart (up to 0.75 s), 2.5-7.5 s apart
	"long bursts": func(rng *rand.Rand, base time.Time, d time.Duration) (ts []time.Time) {
		for x := 2 * time.Second; x < d; x += time.Duration((0.5 + rng.Float64()) * float64(5*time.Second)) {
			for j := range 20 + rng.IntN(131) {
				ts = append(ts, base.Add(x+time.Duration(j)*5*time.Millisecond))
			}
		}
		return ts
	},
	// bursts of 0-80 calls 3 ms apart, 7 s apart on average
	"bursty": func(rng *rand.Rand, base time.Time, d time.Duration) (ts []time.Time) {
		for x := time.Second; x < d; x += time.Duration(rng.ExpFloat64() * float64(7*time.Second)) {
			for j := range rng.IntN(80) {
				ts = append(ts, base.Add(x+time.Duration(j)*3*time.Millisecond))
			}
		}
		return ts
	},
}

// runHystrixGo runs 5 minutes of calls (one in ten failing, with a
// fallback) through ported hystrix-go counts, read once a second at phase
// into a rollingCounts, and returns the counts reported and the calls
// made, by count, and the most successes reported by one read.
func runHystrixGo(t *testing.T, kind string, phase time.Duration, seed uint64) (got, truth [nRolled]int64, most int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(phase)))
	base := clocktest.Noon() // on a whole second, as the buckets are
	var nums [nRolled]goNumber
	for i := range nums {
		nums[i] = goNumber{}
	}
	const d = 5 * time.Minute
	calls := trafficKinds[kind](rng, base, d)
	var r rollingCounts
	l := rollingLayout{bucket: time.Second, buckets: 10, keepsOldest: true}
	callNo := 0
	for tick := base.Add(phase); tick.Before(base.Add(d + 15*time.Second)); tick = tick.Add(time.Second) {
		for len(calls) > 0 && !calls[0].After(tick) {
			at := calls[0]
			calls = calls[1:]
			outcome := rollSuccess
			if (kind != "random" && callNo%10 == 9) || (kind == "random" && rng.IntN(10) == 0) {
				outcome = rollFailure
			}
			callNo++
			incs := []int{outcome, rollRequests}
			if outcome == rollFailure {
				incs = append(incs, rollErrors, rollFallbackSuccess)
			}
			for _, i := range incs {
				nums[i].inc(at)
				if tick.After(base.Add(phase)) { // the first read is a baseline
					truth[i]++
				}
			}
		}
		var vals [nRolled]int64
		for i := range vals {
			vals[i] = int64(nums[i].sum(tick))
		}
		out := r.read(tick, l, vals, rollingHints{})
		for i := range nRolled {
			got[i] += out[i]
		}
		most = max(most, out[rollSuccess])
	}
	return got, truth, most
}

// Against hystrix-go's rolling counts (ported), 5 minutes of calls read
// once a second at 8 phases across the second, 6 runs each, one call in
// ten failing with a fallback. What each kind of traffic gets (measured,
// and stated in the README): steady calls (20 a second) within 2% of the
// calls made, every count (0.9% at most, 0.4% on average), and never
// shown at more than twice their rate in one read; random calls (Poisson,
// 20 a second) within 7% (6.4% at most, 2.7% on average); short bursts
// (up to 80 calls in 0.24 s) within 5% (4.9%, 0.9%); long bursts (up to
// 150 calls over 0.75 s, across reads) within 5% (4.4%, 0.9%). The worst
// are the failures and fallbacks, a tenth of the calls. What remains is
// which second of a read's interval its calls came in, for calls read
// within a bucket, and whether hystrix-go still summed its oldest bucket
// (no record says: rollingCounts.oldestKept judges it; given the true
// answer, the same estimates measured within 2% for random calls and 3.2%
// for long bursts).
func TestRollingCountsOfHystrixGoAddUp(t *testing.T) {
	limits := map[string]struct{ run, mean float64 }{"steady": {0.02, 0.01}, "random": {0.07, 0.03}, "bursty": {0.05, 0.015}, "long bursts": {0.05, 0.015}}
	counts := []struct {
		name string
		i    int
	}{{"successes", rollSuccess}, {"failures", rollFailure}, {"fallback successes", rollFallbackSuccess}}
	for _, kind := range []string{"steady", "random", "bursty", "long bursts"} {
		var sum, worst float64
		runs := 0
		for _, phase := range []time.Duration{5 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
			300 * time.Millisecond, 500 * time.Millisecond, 700 * time.Millisecond, 990 * time.Millisecond} {
			for seed := uint64(1); seed <= 6; seed++ {
				got, truth, most := runHystrixGo(t, kind, phase, seed)
				for _, c := range counts {
					off := float64(got[c.i]-truth[c.i]) / float64(truth[c.i])
					sum += math.Abs(off)
					worst = max(worst, math.Abs(off))
					runs++
					if math.Abs(off) > limits[kind].run {
						t.Errorf("%s calls read at %v into the second (run %d): %s %d, %d made (%+.1f%%)", kind, phase, seed, c.name, got[c.i], truth[c.i], 100*off)
					}
				}
				if kind == "steady" && most > 40 {
					t.Errorf("steady calls (20/s) read at %v: one read reported %d successes, more than twice the rate", phase, most)
				}
			}
		}
		mean := sum / float64(runs)
		t.Logf("%s calls: counts off by %.2f%% on average, %.2f%% at most", kind, 100*mean, 100*worst)
		if mean > limits[kind].mean {
			t.Errorf("%s calls: counts off by %.2f%% on average, want at most %.1f%%", kind, 100*mean, 100*limits[kind].mean)
		}
	}
}

// opossumStatus is opossum's Status window (lib/status.js of opossum
// 10.0.0), ported: 10 buckets, the newest first; each second a timer
// rotates them (a new empty bucket in front, the oldest dropped) and the
// snapshot opossum-hystrix streams, taken by a second timer of the same
// period created just after, sums them all.
type opossumStatus [10]int64

func (s *opossumStatus) rotate() { copy(s[1:], s[:9]); s[0] = 0 }

func (s *opossumStatus) sum() (n int64) {
	for _, v := range s {
		n += v
	}
	return n
}

// Against opossum's window (ported), read at each snapshot from before
// the calls begin: the calls of each second are known exactly (the bucket
// that leaves is the one reported nine reads before), so steady, random
// and bursty calls add up exactly, and each read shows the calls of its
// second.
func TestRollingCountsOfOpossumAddUp(t *testing.T) {
	for kind, calls := range trafficKinds {
		rng := rand.New(rand.NewPCG(7, 7))
		start := clocktest.Noon().Add(437 * time.Millisecond) // the breaker's timers began then
		base := start.Add(3 * time.Second)                    // the calls begin
		const d = 5 * time.Minute
		ts := calls(rng, base, d)
		var s opossumStatus
		var r rollingCounts
		l := rollingLayout{perRecord: true, bucket: time.Second, buckets: 10}
		var got, made int64
		for snap := start; snap.Before(base.Add(d + 15*time.Second)); snap = snap.Add(time.Second) {
			var now int64
			for len(ts) > 0 && ts[0].Before(snap) {
				s[0]++
				now++
				ts = ts[1:]
			}
			made += now
			s.rotate()
			var vals [nRolled]int64
			vals[rollSuccess] = s.sum()
			out := r.read(snap.Add(2*time.Millisecond), l, vals, rollingHints{})
			got += out[rollSuccess]
			if out[rollSuccess] != now {
				t.Errorf("%s calls: a read reported %d, %d came since the one before", kind, out[rollSuccess], now)
			}
		}
		if got != made {
			t.Errorf("%s calls: %d reported, %d made", kind, got, made)
		}
	}
}

// hystrix-go clears a circuit's counts when it closes (its trial call
// succeeded): the read after reports the calls since, and those between
// the read before and the clearing as the rate before tells.
func TestRollingCountsClearedByTheWriter(t *testing.T) {
	var r rollingCounts
	l := rollingLayout{bucket: time.Second, buckets: 10, keepsOldest: true}
	at := clocktest.Noon().Add(300 * time.Millisecond)
	var vals [nRolled]int64
	// 20 short-circuited calls a second for 10 s.
	var made int64
	for range 10 {
		vals[rollShortCircuited] += 20
		vals[rollRequests] += 20
		made += 20
		r.read(at, l, vals, rollingHints{})
		at = at.Add(time.Second)
	}
	// Cleared 0.5 s after the last read: 10 short-circuited calls before,
	// then a success and 9 more successes.
	vals = [nRolled]int64{}
	vals[rollSuccess], vals[rollRequests] = 10, 10
	out := r.read(at, l, vals, rollingHints{cleared: true})
	if out[rollSuccess] != 10 || out[rollShortCircuited] < 8 || out[rollShortCircuited] > 12 {
		t.Errorf("after the clearing: %d successes, %d short-circuited; want the 10 successes and about 10 short-circuited calls before it", out[rollSuccess], out[rollShortCircuited])
	}
}
