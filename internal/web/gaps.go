package web

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

// gaps returns the gaps of q's range (History.Gaps).
func (s *Server) gaps(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Gap, error) {
	return s.history.Gaps(ctx, q)
}

// dependencyChartsWithGaps is dependencyCharts with the history's gaps
// (time an agent's dropped reports covered) drawn on every chart as
// hatched "data lost" bands, and named in the tooltips of the columns
// they cover.
func dependencyChartsWithGaps(pts []cbdash.Point, gaps []cbdash.Gap, from, to time.Time, d cbdash.Dependency) []templates.Chart {
	charts := dependencyCharts(pts, from, to, d)
	if len(gaps) == 0 {
		return charts
	}
	cols, start, colW := columns(pts, from, to)
	end := start.Add(colW * time.Duration(len(cols)))
	bands := gapBands(gaps, start, end)
	for i := range charts {
		c := &charts[i]
		c.Gaps = bands
		for j := range c.Hover {
			colFrom := start.Add(colW * time.Duration(j))
			if lost := lostIn(gaps, colFrom, colFrom.Add(colW)); lost != "" {
				c.Hover[j].Title += "\n" + lost
			}
		}
	}
	return charts
}

// gapBands merges overlapping gaps (of several instances) into bands
// across the plot, clipped to [start, end).
func gapBands(gaps []cbdash.Gap, start, end time.Time) []templates.GapBand {
	gaps = slices.Clone(gaps)
	slices.SortFunc(gaps, func(a, b cbdash.Gap) int { return a.From.Compare(b.From) })
	x := func(t time.Time) float64 {
		d := min(max(t.Sub(start), 0), end.Sub(start))
		return chartLeft + float64(d)/float64(end.Sub(start))*(chartRight-chartLeft)
	}
	var out []templates.GapBand
	var cur []cbdash.Gap
	var curTo time.Time
	flush := func() {
		if len(cur) == 0 {
			return
		}
		from := cur[0].From
		x0, x1 := x(from), x(curTo)
		if x1 > x0 {
			out = append(out, templates.GapBand{X: x0, W: max(x1-x0, 1), Title: gapTitle(cur, from, curTo)})
		}
		cur = nil
	}
	for _, g := range gaps {
		if !g.To.After(start) || !g.From.Before(end) {
			continue
		}
		if len(cur) > 0 && g.From.After(curTo) {
			flush()
		}
		if len(cur) == 0 || g.To.After(curTo) {
			curTo = g.To
		}
		cur = append(cur, g)
	}
	flush()
	return out
}

func gapTitle(gs []cbdash.Gap, from, to time.Time) string {
	var calls int64
	var insts []string
	for _, g := range gs {
		calls += g.Calls
		if !slices.Contains(insts, g.Instance) {
			insts = append(insts, g.Instance)
		}
	}
	return fmt.Sprintf("data lost %s to %s UTC: the agent of %s dropped its reports under memory pressure (%d calls not in the charts)",
		from.UTC().Format("15:04:05"), to.UTC().Format("15:04:05"), strings.Join(insts, ", "), calls)
}

// lostIn names the gaps overlapping [from, to) for a tooltip, or "".
func lostIn(gaps []cbdash.Gap, from, to time.Time) string {
	var calls int64
	n := 0
	for _, g := range gaps {
		if g.From.Before(to) && g.To.After(from) {
			calls += g.Calls
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("data lost: %d calls of %d gap(s) not shown", calls, n)
}

// misuseIn sums the misuse counts (calls ended twice) of history points.
func misuseIn(pts []cbdash.Point) int64 {
	var n int64
	for _, p := range pts {
		n += p.Counts.Misuse
	}
	return n
}
