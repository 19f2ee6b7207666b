package source

import (
	"math"
	"sort"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// delta is the increase of a cumulative counter (a Prometheus counter)
// from prev to cur; a counter that went down was reset (the service
// restarted), and its whole value is new.
func delta(prev, cur float64, seen bool) int64 {
	if !seen {
		return 0
	}
	if cur < prev {
		return toCount(cur)
	}
	return toCount(cur - prev)
}

func toCount(v float64) int64 {
	if v != v || v <= 0 {
		return 0
	}
	return int64(math.Min(math.Round(v), protocol.MaxCount))
}

// quantile is one point of a latency distribution: the q-quantile (0..1)
// is ms milliseconds.
type quantile struct{ q, ms float64 }

// histogram spreads n calls over protocol.LatencyBoundsMillis following a
// latency distribution known by some of its quantiles (Hystrix's
// percentiles, a Prometheus summary): the calls between two known
// quantiles are taken as spread evenly between their latencies, those
// below the lowest known quantile at its latency, those above the highest
// at its latency. Without quantiles every call is put at meanMs. The
// counts add up to n exactly. It returns nil when n is 0.
func histogram(n int64, qs []quantile, meanMs float64) []int64 {
	if n <= 0 {
		return nil
	}
	var pts []quantile
	for _, p := range qs {
		if p.q >= 0 && p.q <= 1 && p.ms >= 0 && !math.IsNaN(p.ms) && !math.IsInf(p.ms, 0) {
			pts = append(pts, p)
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].q < pts[j].q })
	share := make([]float64, protocol.NumLatencyBuckets)
	if len(pts) == 0 {
		share[bucketOf(max(meanMs, 0))] = 1
	} else {
		share[bucketOf(pts[0].ms)] += pts[0].q
		for i := 1; i < len(pts); i++ {
			spread(share, pts[i-1].ms, pts[i].ms, pts[i].q-pts[i-1].q)
		}
		last := pts[len(pts)-1]
		share[bucketOf(last.ms)] += 1 - last.q
	}
	return apportion(n, share)
}

// spread adds weight w to share, spread evenly over latencies [a, b] ms.
func spread(share []float64, a, b, w float64) {
	if w <= 0 {
		return
	}
	if b < a {
		a, b = b, a
	}
	if b == a {
		share[bucketOf(a)] += w
		return
	}
	bounds := protocol.LatencyBoundsMillis
	lo := 0.0
	for i := range share {
		hi := math.Inf(1)
		if i < len(bounds) {
			hi = bounds[i]
		}
		if o := math.Min(b, hi) - math.Max(a, lo); o > 0 {
			share[i] += w * o / (b - a)
		}
		lo = hi
	}
}

// bucketOf is the latency bucket of a call of ms milliseconds.
func bucketOf(ms float64) int {
	for i, b := range protocol.LatencyBoundsMillis {
		if ms <= b {
			return i
		}
	}
	return len(protocol.LatencyBoundsMillis)
}

// apportion splits n by the weights in share (largest remainder), so that
// the counts add up to n.
func apportion(n int64, share []float64) []int64 {
	var total float64
	for _, s := range share {
		total += s
	}
	out := make([]int64, len(share))
	if total <= 0 {
		out[0] = n
		return out
	}
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, len(share))
	var given int64
	for i, s := range share {
		exact := float64(n) * s / total
		out[i] = int64(math.Floor(exact))
		given += out[i]
		rems[i] = rem{i, exact - math.Floor(exact)}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; given < n; k = (k + 1) % len(rems) {
		out[rems[k].i]++
		given++
	}
	return out
}
