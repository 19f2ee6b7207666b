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
	sparkSpan    = 15 * time.Minute
	sparkBuckets = 15 // one per minute
	sparkTTL     = 30 * time.Second
)

// sparkCache holds the 15-minute sparklines of the overview tiles. The
// store is asked for minute-resolution history of a dependency at most
// once per sparkTTL, and never for longer than a time budget per page or
// live update, so rendering 1,000 tiles does not wait for 1,000 queries:
// a sparkline not fetched yet is drawn empty and filled in by a later
// render or live update. Safe for concurrent use.
type sparkCache struct {
	hist History
	now  func() time.Time

	mu      sync.Mutex
	entries map[cbdash.DependencyKey]sparkEntry
}

type sparkEntry struct {
	spark templates.Spark
	at    time.Time
}

func newSparkCache(h History, now func() time.Time) *sparkCache {
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
			out[k] = templates.Spark{Empty: true, Title: "15 minutes: loading"}
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
			DependencyKey: k, From: now.Truncate(time.Minute).Add(-sparkSpan), To: now, Resolution: cbdash.ResolutionMinute,
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

// sparkOf draws calls and failures per minute over the last 15 minutes
// into a 100x24 box; both lines share the calls' scale.
//
// Only complete minutes are drawn: the current one would look like a drop.
func sparkOf(pts []cbdash.Point, now time.Time) templates.Spark {
	start := now.Truncate(time.Minute).Add(-sparkSpan)
	var calls, fails [sparkBuckets]float64
	var any bool
	for _, p := range pts {
		i := int(p.At.Sub(start) / time.Minute)
		if p.At.Before(start) || i >= sparkBuckets {
			continue
		}
		calls[i] += float64(p.Counts.Admitted + p.Counts.Rejected())
		fails[i] += float64(p.Counts.Failures)
		any = true
	}
	if !any {
		return templates.Spark{Empty: true, Title: "15 minutes: no calls"}
	}
	var peak, total, totalFail float64
	for i := range calls {
		peak = max(peak, calls[i])
		total += calls[i]
		totalFail += fails[i]
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
			b.WriteString(strconv.FormatFloat(float64(i)*100/(sparkBuckets-1), 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(23-22*y/peak, 'f', 1, 64))
		}
		return b.String()
	}
	return templates.Spark{
		Calls:    line(&calls),
		Failures: line(&fails),
		Title: "15 min: " + strconv.FormatFloat(total, 'f', 0, 64) + " calls (blue), " +
			strconv.FormatFloat(totalFail, 'f', 0, 64) + " failures (red); peak " + strconv.FormatFloat(peak, 'f', 0, 64) + "/min",
	}
}
