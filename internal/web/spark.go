package web

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

const (
	sparkSpan    = 10 * time.Minute
	sparkBucket  = 10 * time.Second
	sparkBuckets = int(sparkSpan / sparkBucket) // 60
	sparkTTL     = sparkBucket
)

// sparkCache holds the 10-minute sparklines of the overview tiles. The
// store is asked for minute-resolution history of a dependency at most
// once per sparkTTL (second resolution), and never for longer than a time budget per page or
// live update, so rendering 1,000 tiles does not wait for 1,000 queries:
// a sparkline not fetched yet is drawn empty and filled in by a later
// render or live update. Safe for concurrent use.
type sparkCache struct {
	hist pointReader
	now  func() time.Time

	mu      sync.Mutex
	entries map[cbdash.DependencyKey]sparkEntry
}

type sparkEntry struct {
	spark templates.Spark
	at    time.Time
}

// pointReader is what a sparkCache reads: History's points.
type pointReader interface {
	History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error)
}

func newSparkCache(h pointReader, now func() time.Time) *sparkCache {
	return &sparkCache{hist: h, now: now, entries: make(map[cbdash.DependencyKey]sparkEntry)}
}

// get returns the sparklines of keys, refreshing stale ones oldest first
// until budget is spent. Store errors leave the old sparkline in place.
func (c *sparkCache) get(ctx context.Context, keys []cbdash.DependencyKey, budget time.Duration) map[cbdash.DependencyKey]templates.Spark {
	start := time.Now() // the budget is wall time, whatever the injected clock says
	now := c.now()
	out := make(map[cbdash.DependencyKey]templates.Spark, len(keys))
	var stale []cbdash.DependencyKey
	c.mu.Lock()
	for _, k := range keys {
		e, ok := c.entries[k]
		out[k] = e.spark
		if !ok {
			out[k] = templates.Spark{Empty: true, Title: "last 10 min: loading"}
		}
		if !ok || now.Sub(e.at) >= sparkTTL {
			stale = append(stale, k)
		}
	}
	c.mu.Unlock()
	for _, k := range stale {
		if time.Since(start) > budget || ctx.Err() != nil {
			break
		}
		pts, err := c.hist.History(ctx, cbdash.HistoryQuery{
			DependencyKey: k, From: now.Truncate(sparkBucket).Add(-sparkSpan), To: now.Truncate(sparkBucket), Resolution: cbdash.ResolutionSecond,
		})
		if err != nil {
			continue
		}
		s := sparkOf(pts, now)
		out[k] = s
		c.mu.Lock()
		c.entries[k] = sparkEntry{spark: s, at: now}
		c.mu.Unlock()
	}
	return out
}

// sparkOf draws, over the last 10 minutes in 10-second buckets, the
// admitted, failed and rejected calls apart, into a 100x24 box on one
// scale (the busiest bucket of admitted or rejected calls).
//
// Only complete buckets are drawn: the current one would look like a drop.
func sparkOf(pts []cbdash.Point, now time.Time) templates.Spark {
	start := now.Truncate(sparkBucket).Add(-sparkSpan)
	var adm, fail, rej [sparkBuckets]float64
	var any bool
	for _, p := range pts {
		i := int(p.At.Sub(start) / sparkBucket)
		if p.At.Before(start) || i >= sparkBuckets {
			continue
		}
		adm[i] += float64(p.Counts.Admitted)
		fail[i] += float64(p.Counts.Failures)
		rej[i] += float64(p.Counts.Rejected())
		any = true
	}
	if !any {
		return templates.Spark{Empty: true, Title: "last 10 min: no calls"}
	}
	var peak, tAdm, tFail, tRej float64
	for i := range adm {
		peak = max(peak, adm[i], rej[i])
		tAdm += adm[i]
		tFail += fail[i]
		tRej += rej[i]
	}
	if peak == 0 {
		peak = 1
	}
	line := func(v *[sparkBuckets]float64) string {
		var b strings.Builder
		for i, y := range v {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(float64(i)*100/float64(sparkBuckets-1), 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(23-22*y/peak, 'f', 1, 64))
		}
		return b.String()
	}
	n := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	return templates.Spark{
		Admitted: line(&adm),
		Failed:   line(&fail),
		Rejected: line(&rej),
		Peak:     n(peak) + " per 10 s",
		Title: "last 10 min, per 10 s: " + n(tAdm) + " admitted, " + n(tFail) + " failed, " + n(tRej) +
			" rejected; peak " + n(peak) + " per 10 s",
	}
}
