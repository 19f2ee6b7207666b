package templates

import "strconv"

// Heatmap is the dependency page's instances against time: one row per
// instance, worst first, one cell per bucket of minutes, coloured by the
// worst state in the bucket or, while closed, by its failure rate.
type Heatmap struct {
	Rows   []HeatRow
	Ticks  []Tick // labels only, evenly spaced under the rows
	Bucket string // "1 min", "5 min"
	Range  string // the span drawn, in words
	// Shown is "instances 1-50 of 120"; Prev and Next link the
	// neighbouring pages ("" = none).
	Shown, Prev, Next string
	Empty             bool // no per-instance history in the span
}

// HeatRow is one instance's row.
type HeatRow struct {
	Instance string
	// Summary: "45% failed (90/200), not closed 3m09s in 12 min": failed
	// of admitted calls; how long the breaker was out of closed, and in
	// how many minutes (any moment of each); "not closed at some moment
	// of 12 min" when the span has too many transitions to add up.
	Summary string
	Cells   []HeatCell
}

// HeatCell is one bucket of one instance, in viewBox units.
type HeatCell struct {
	X, W  float64
	Class string // "h-open", "h-half-open", "h-forced", "h-f0".."h-f4", "h-idle"
	Title string
}

// heatPage is how many instances one page of the heatmap shows.
const heatPage = 50

// HeatPage is how many instances one page of the heatmap shows.
const HeatPage = heatPage

func fmtF(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }
