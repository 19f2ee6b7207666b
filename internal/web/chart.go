package web

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// Chart geometry in viewBox units.
const (
	chartW, chartH        = 560.0, 190.0
	chartLeft, chartRight = 46.0, 550.0
	chartTop, chartBottom = 10.0, 165.0
	maxColumns            = 120
)

// column is one x bucket of a chart: history points merged.
type column struct {
	has     bool
	counts  protocol.Counts
	latency []int64
	open    int
}

// columns merges history points into at most about maxColumns buckets
// covering [from, to). A bucket is a whole number of point widths,
// aligned on its width, so that every bucket sums the same number of
// points; a bucket with no point has has == false (a gap). It returns the
// buckets, the start of the first and their width.
func columns(pts []cbdash.Point, from, to time.Time) ([]column, time.Time, time.Duration) {
	width := time.Second
	if len(pts) > 0 && pts[0].Width > 0 {
		width = pts[0].Width
	}
	per := max(1, int(math.Ceil(float64(to.Sub(from))/float64(width)/maxColumns)))
	colW := width * time.Duration(per)
	start := from.Truncate(colW)
	n := max(1, int(math.Ceil(float64(to.Sub(start))/float64(colW))))
	cols := make([]column, n)
	for _, p := range pts {
		i := int(p.At.Sub(start) / colW)
		if i < 0 || i >= n {
			continue
		}
		c := &cols[i]
		c.has = true
		c.counts.Add(p.Counts)
		if len(p.Latency) > 0 {
			if c.latency == nil {
				c.latency = make([]int64, len(p.Latency))
			}
			for j := range min(len(p.Latency), len(c.latency)) {
				c.latency[j] += p.Latency[j]
			}
		}
		c.open = max(c.open, p.Open)
	}
	return cols, start, colW
}

// percentile estimates the q-quantile (0..1) in milliseconds from a
// histogram over protocol.LatencyBoundsMillis (protocol.QuantileMillis);
// NaN when empty.
func percentile(h []int64, q float64) float64 {
	ms, ok := protocol.QuantileMillis(h, q)
	if !ok {
		return math.NaN()
	}
	return ms
}

type seriesData struct {
	name, class string
	v           []float64 // one per column; NaN = gap
}

type thresholdData struct {
	v     float64
	label string
	class string // t2 failure (red, long dashes), t3 slow call (amber, short dashes), t0 both
}

type chartSpec struct {
	id, title, unit string
	from            time.Time
	colW            time.Duration
	series          []seriesData
	thresholds      []thresholdData
	minMax          float64 // the y axis reaches at least this
}

// buildChart projects series into the chart's viewBox: nice y ticks from
// 0, time ticks in UTC, a hover column per bucket whose tooltip lists
// every series at that time.
func buildChart(s chartSpec) templates.Chart {
	c := templates.Chart{ID: s.id, Title: s.title, Unit: s.unit, W: chartW, H: chartH,
		Left: chartLeft, Right: chartRight, Top: chartTop, Bottom: chartBottom}
	n := 0
	peak := s.minMax
	empty := true
	for _, sd := range s.series {
		n = max(n, len(sd.v))
		for _, v := range sd.v {
			if !math.IsNaN(v) {
				peak = math.Max(peak, v)
				empty = false
			}
		}
	}
	for _, t := range s.thresholds {
		peak = math.Max(peak, t.v*1.15)
	}
	c.Empty = empty
	top := niceCeil(peak)
	y := func(v float64) float64 { return chartBottom - v/top*(chartBottom-chartTop) }
	step := top / 4
	for i := 0; i <= 4; i++ {
		v := step * float64(i)
		c.YTicks = append(c.YTicks, templates.Tick{Pos: y(v), Label: shortNum(v)})
	}
	if n == 0 {
		return c
	}
	colPx := (chartRight - chartLeft) / float64(n)
	x := func(i int) float64 { return chartLeft + (float64(i)+0.5)*colPx }
	to := s.from.Add(s.colW * time.Duration(n))
	c.XTicks = timeTicks(s.from, to, func(t time.Time) float64 {
		return chartLeft + float64(t.Sub(s.from))/float64(to.Sub(s.from))*(chartRight-chartLeft)
	})
	for _, t := range s.thresholds {
		c.Thresholds = append(c.Thresholds, templates.Threshold{Y: y(t.v), Label: t.label, Class: t.class})
	}
	for _, sd := range s.series {
		ser := templates.Series{Name: sd.name, Class: sd.class}
		var b strings.Builder
		pts := 0
		end := func() {
			if pts == 1 { // a lone bucket: a short dash, so that it shows
				last := b.String()
				b.Reset()
				xs, ys, _ := strings.Cut(last, ",")
				xv, _ := strconv.ParseFloat(xs, 64)
				fmt.Fprintf(&b, "%.1f,%s %.1f,%s", xv-1.5, ys, xv+1.5, ys)
			}
			if pts > 0 {
				ser.Parts = append(ser.Parts, b.String())
			}
			b.Reset()
			pts = 0
		}
		for i, v := range sd.v {
			if math.IsNaN(v) {
				end()
				continue
			}
			if pts > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(x(i), 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y(v), 'f', 1, 64))
			pts++
		}
		end()
		c.Series = append(c.Series, ser)
	}
	for i := range n {
		var tip strings.Builder
		tip.WriteString(s.from.Add(s.colW * time.Duration(i)).UTC().Format("Jan 2 15:04:05 UTC"))
		for _, sd := range s.series {
			if i < len(sd.v) && !math.IsNaN(sd.v[i]) {
				tip.WriteString("\n" + sd.name + ": " + strconv.FormatFloat(sd.v[i], 'f', 2, 64) + " " + s.unit)
			}
		}
		c.Hover = append(c.Hover, templates.HoverCol{X: chartLeft + float64(i)*colPx, W: colPx, Title: tip.String()})
	}
	return c
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for 0).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*1.0000001 {
			return m * p
		}
	}
	return 10 * p
}

func shortNum(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// timeTicks picks a tick step giving at most 6 ticks over [from, to) and
// labels them in UTC.
func timeTicks(from, to time.Time, pos func(time.Time) float64) []templates.Tick {
	span := to.Sub(from)
	steps := []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
		30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
		24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if span/s <= 6 {
			step = s
			break
		}
	}
	layout := "15:04"
	if step >= 24*time.Hour {
		layout = "Jan 2"
	}
	var ticks []templates.Tick
	for t := from.UTC().Truncate(step); t.Before(to); t = t.Add(step) {
		if t.Before(from) {
			continue
		}
		ticks = append(ticks, templates.Tick{Pos: pos(t), Label: t.Format(layout)})
	}
	return ticks
}

// dependencyCharts builds the five charts of a dependency page.
func dependencyCharts(pts []cbdash.Point, from, to time.Time, d cbdash.Dependency) []templates.Chart {
	cols, start, colW := columns(pts, from, to)
	// The last bucket may be cut short by the end of the range.
	secs := func(i int) float64 {
		end := start.Add(colW * time.Duration(i+1))
		if end.After(to) {
			return max(1, to.Sub(start.Add(colW*time.Duration(i))).Seconds())
		}
		return colW.Seconds()
	}
	per := func(f func(protocol.Counts) int64) []float64 {
		v := make([]float64, len(cols))
		for i, c := range cols {
			v[i] = math.NaN()
			if c.has {
				v[i] = float64(f(c.counts)) / secs(i)
			}
		}
		return v
	}
	ratio := func(f func(protocol.Counts) int64) []float64 {
		v := make([]float64, len(cols))
		for i, c := range cols {
			v[i] = math.NaN()
			if rec := c.counts.Successes + c.counts.Failures; c.has && rec > 0 {
				v[i] = 100 * float64(f(c.counts)) / float64(rec)
			}
		}
		return v
	}
	quant := func(q float64) []float64 {
		v := make([]float64, len(cols))
		for i, c := range cols {
			v[i] = percentile(c.latency, q)
		}
		return v
	}
	opens := make([]float64, len(cols))
	for i, c := range cols {
		opens[i] = math.NaN()
		if c.has {
			opens[i] = float64(c.open)
		}
	}
	var fthr []thresholdData
	if cfg, ok := firstConfig(d); ok {
		fthr = rateThresholds(cfg)
	}
	return []templates.Chart{
		buildChart(chartSpec{id: "chart-requests", title: "Request rate by outcome", unit: "calls/s", from: start, colW: colW, minMax: 1,
			series: []seriesData{
				{"successes", "c5", per(func(c protocol.Counts) int64 { return c.Successes })},
				{"failures", "c2", per(func(c protocol.Counts) int64 { return c.Failures })},
				{"slow", "c3", per(func(c protocol.Counts) int64 { return c.Slow })},
				{"rejected", "c4", per(protocol.Counts.Rejected)},
			}}),
		buildChart(chartSpec{id: "chart-rates", title: "Failure and slow-call rates", unit: "%", from: start, colW: colW, minMax: 10, thresholds: fthr,
			series: []seriesData{
				{"failure rate", "c2", ratio(func(c protocol.Counts) int64 { return c.Failures })},
				{"slow-call rate", "c3", ratio(func(c protocol.Counts) int64 { return c.Slow })},
			}}),
		buildChart(chartSpec{id: "chart-latency", title: "Latency percentiles", unit: "ms", from: start, colW: colW, minMax: 1,
			series: []seriesData{{"p50", "c1", quant(0.5)}, {"p90", "c3", quant(0.9)}, {"p99", "c2", quant(0.99)}}}),
		buildChart(chartSpec{id: "chart-rejections", title: "Rejections and fallbacks", unit: "calls/s", from: start, colW: colW, minMax: 1,
			series: []seriesData{
				{"rejected open", "c2", per(func(c protocol.Counts) int64 { return c.RejectedOpen })},
				{"rejected half-open full", "c3", per(func(c protocol.Counts) int64 { return c.RejectedHalfOpen })},
				{"rejected forced open", "c4", per(func(c protocol.Counts) int64 { return c.RejectedForced })},
				{"rejected bulkhead", "c6", per(func(c protocol.Counts) int64 { return c.RejectedBulkhead })},
				{"fallback ok", "c5", per(func(c protocol.Counts) int64 { return c.FallbackSuccess })},
				{"fallback failed", "c1", per(func(c protocol.Counts) int64 { return c.FallbackFailure })},
			}}),
		buildChart(chartSpec{id: "chart-open", title: "Instances not closed", unit: "instances", from: start, colW: colW,
			minMax: float64(max(1, d.Instances)), series: []seriesData{{"not closed", "c2", opens}}}),
	}
}

// firstConfig is the configuration of the first live instance (or any).
// rateThresholds are the rate chart's threshold lines, each in its
// series' colour with its own dashes; equal thresholds are one line
// ("failure and slow-call threshold 50%") rather than two drawn on top
// of each other.
func rateThresholds(cfg protocol.BreakerConfig) []thresholdData {
	slow := cfg.SlowCallDurationMillis > 0 && cfg.SlowCallRateThreshold > 0
	if slow && cfg.FailureRateThreshold == cfg.SlowCallRateThreshold {
		return []thresholdData{{cfg.FailureRateThreshold, "failure and slow-call threshold " + wording.Pct(cfg.FailureRateThreshold), "t0"}}
	}
	var out []thresholdData
	if cfg.FailureRateThreshold > 0 {
		out = append(out, thresholdData{cfg.FailureRateThreshold, "failure threshold " + wording.Pct(cfg.FailureRateThreshold), "t2"})
	}
	if slow {
		out = append(out, thresholdData{cfg.SlowCallRateThreshold, "slow-call threshold " + wording.Pct(cfg.SlowCallRateThreshold), "t3"})
	}
	return out
}

func firstConfig(d cbdash.Dependency) (protocol.BreakerConfig, bool) {
	for _, in := range d.PerInstance {
		if !in.Stale {
			return *in.Config, true
		}
	}
	if len(d.PerInstance) > 0 {
		return *d.PerInstance[0].Config, true
	}
	return protocol.BreakerConfig{}, false
}
