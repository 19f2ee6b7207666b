package cbdash

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// ShownRate is a failure or slow-call rate as the dashboard, the JSON API
// and the CLI show it: one rule (RatesOf), so the three never disagree.
type ShownRate struct {
	// Label names the rate and where it comes from: "failure rate" (the
	// sliding window of a closed breaker), "failure rate, tripped at" (the
	// rate that tripped an open or half-open breaker, at the trip),
	// "slow-call rate, at trip" (the other rate of that window) or
	// "failure rate, last min" (an open breaker whose trip is unknown).
	Label string `json:"label"`
	// Value is the rate in percent; Threshold its threshold in percent, 0
	// when there is none (slow-call detection off).
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Judged is false while a closed breaker's window holds fewer calls
	// than its minimum: the breaker cannot open yet, whatever Value says.
	Judged bool `json:"judged"`
	// Text is the figure in words: "55% of 50%", "12.5% (no threshold)",
	// "not judged yet (1 of 20 calls)".
	Text string `json:"text"`
}

// Pct formats a percentage as the dashboard and the CLI print it: whole
// numbers without decimals ("50%"), others with one ("12.5%").
func Pct(v float64) string {
	var buf [32]byte
	return string(appendPct(buf[:0], v))
}

// appendPct appends Pct(v) to b.
func appendPct(b []byte, v float64) []byte {
	if v == math.Trunc(v) {
		if v >= 0 && v < 1e15 && !math.Signbit(v) {
			// A whole number, as AppendFloat(v, 'f', 0) writes it, faster.
			return append(strconv.AppendInt(b, int64(v), 10), '%')
		}
		return append(strconv.AppendFloat(b, v, 'f', 0, 64), '%')
	}
	return append(strconv.AppendFloat(b, v, 'f', 1, 64), '%')
}

// shownRate builds its text in one allocation: the collector makes two
// for every instance line it rebuilds, thousands a second. prev, when
// not nil, is the rate shown before (in the line this one replaces):
// when it is the same rate, its text is shared rather than built again.
func shownRate(label string, value, threshold float64, prev *ShownRate) ShownRate {
	if prev != nil && prev.Judged && prev.Value == value && prev.Threshold == threshold && prev.Label == label {
		return *prev
	}
	r := ShownRate{Label: label, Value: value, Threshold: threshold, Judged: true}
	var buf [64]byte
	b := appendPct(buf[:0], value)
	if threshold <= 0 {
		b = append(b, " (no threshold)"...)
	} else {
		b = appendPct(append(b, " of "...), threshold)
	}
	r.Text = string(b)
	return r
}

// windowRates are the failure and slow-call rates of a closed breaker's
// sliding window h; below its minimum calls both say "not judged yet",
// in one text.
// prev, when not nil, are the rates shown before (see shownRate).
func windowRates(h protocol.Headroom, prev *ShownRates) (failure, slow ShownRate) {
	if c := ClosenessOf(h); !c.Judged {
		text := "not judged yet (" + c.NotJudgedText() + ")"
		return ShownRate{Label: "failure rate", Value: h.FailureRate, Threshold: h.FailureRateThreshold, Text: text},
			ShownRate{Label: "slow-call rate", Value: h.SlowCallRate, Threshold: h.SlowCallRateThreshold, Text: text}
	}
	pf, ps := prev.rates()
	return shownRate("failure rate", h.FailureRate, h.FailureRateThreshold, pf),
		shownRate("slow-call rate", h.SlowCallRate, h.SlowCallRateThreshold, ps)
}

// rates returns pointers to r's two rates, nil when r is.
func (r *ShownRates) rates() (failure, slow *ShownRate) {
	if r == nil {
		return nil, nil
	}
	return &r.Failure, &r.Slow
}

// Tripped reports whether a state is one a breaker reaches by tripping:
// open or half-open (not an operator's forced open).
func Tripped(state string) bool {
	return state == protocol.StateOpen || state == protocol.StateHalfOpen
}

// RateTrip reports whether a cause is a trip by a rate (failure or slow
// call), the trips whose rates RatesOf shows.
func RateTrip(c protocol.Cause) bool {
	return c.Kind == protocol.CauseFailureRate || c.Kind == protocol.CauseSlowCallRate
}

// RatesOf gives the failure and slow-call rates shown for d:
//   - while closed (or forced closed, or no live instance): the sliding
//     window closest to opening (d.Headroom), "not judged yet" below the
//     minimum calls;
//   - open or half-open with a known trip: the rates of the window that
//     tripped it, against its thresholds ("tripped at 55% of 50%"), from
//     the first live tripped instance (PerInstance order) whose trip is
//     known: causes[instance] when causes has it, else its LastTrip;
//   - otherwise the last minute's rates (d.FailureRate, d.SlowCallRate).
//
// causes may be nil.
func RatesOf(d Dependency, causes map[string]protocol.Cause) (failure, slow ShownRate) {
	h := d.Headroom
	if c, ok := depTrip(d, causes); ok {
		switch c.Kind {
		case protocol.CauseFailureRate:
			return shownRate("failure rate, tripped at", c.FailureRate, c.Threshold, nil), shownRate("slow-call rate, at trip", c.SlowCallRate, h.SlowCallRateThreshold, nil)
		case protocol.CauseSlowCallRate:
			return shownRate("failure rate, at trip", c.FailureRate, h.FailureRateThreshold, nil), shownRate("slow-call rate, tripped at", c.SlowCallRate, c.Threshold, nil)
		}
	}
	if d.State == protocol.StateClosed || d.State == protocol.StateForcedClosed || d.State == "" {
		return windowRates(h, nil)
	}
	return shownRate("failure rate, last min", d.FailureRate, h.FailureRateThreshold, nil),
		shownRate("slow-call rate, last min", d.SlowCallRate, h.SlowCallRateThreshold, nil)
}

func depTrip(d Dependency, causes map[string]protocol.Cause) (protocol.Cause, bool) {
	if !Tripped(d.State) {
		return protocol.Cause{}, false
	}
	for _, in := range d.PerInstance {
		if in.Stale || !Tripped(in.State) {
			continue
		}
		if c, ok := causes[in.Instance]; ok && RateTrip(c) {
			return c, true
		}
		if t := in.LastTrip; t != nil && RateTrip(t.Cause) {
			return t.Cause, true
		}
	}
	return protocol.Cause{}, false
}

// ShownRates are the failure and slow-call rates shown for a dependency
// or an instance (RatesOf, InstanceRatesOf).
type ShownRates struct {
	Failure ShownRate `json:"failure"`
	Slow    ShownRate `json:"slow"`
}

// InstanceRatesOf gives the rates shown for one instance's breaker: for a
// tripped one whose trip is known (cause, or else its LastTrip) the rates
// at the trip, otherwise its last window report's sliding window. cause
// may be nil.
func InstanceRatesOf(in InstanceBreaker, cause *protocol.Cause) (failure, slow ShownRate) {
	return instanceRatesOf(&in, cause, nil)
}

// LineRatesOf is InstanceRatesOf of *in, without copying the line.
func LineRatesOf(in *InstanceBreaker, cause *protocol.Cause) (failure, slow ShownRate) {
	return instanceRatesOf(in, cause, nil)
}

// LineRatesAfter is LineRatesOf(in, nil) for a line that replaces one
// showing prev (nil: none): a rate the same as before (label, value,
// threshold, judged) is prev's, its text shared rather than built again
// (the collector rebuilds thousands of lines a second, most showing what
// they showed).
func LineRatesAfter(in *InstanceBreaker, prev *ShownRates) (failure, slow ShownRate) {
	return instanceRatesOf(in, nil, prev)
}

func instanceRatesOf(in *InstanceBreaker, cause *protocol.Cause, prev *ShownRates) (failure, slow ShownRate) {
	var h protocol.Headroom // none without a window (Last nil: a line not from live state)
	if in.Last != nil {
		h = in.Last.Headroom
	}
	if Tripped(in.State) && !in.Stale {
		c := cause
		if c == nil && in.LastTrip != nil {
			c = &in.LastTrip.Cause
		}
		if c != nil {
			switch c.Kind {
			case protocol.CauseFailureRate:
				pf, ps := prev.rates()
				return shownRate("failure rate, tripped at", c.FailureRate, c.Threshold, pf), shownRate("slow-call rate, at trip", c.SlowCallRate, h.SlowCallRateThreshold, ps)
			case protocol.CauseSlowCallRate:
				pf, ps := prev.rates()
				return shownRate("failure rate, at trip", c.FailureRate, h.FailureRateThreshold, pf), shownRate("slow-call rate, tripped at", c.SlowCallRate, c.Threshold, ps)
			}
		}
	}
	return windowRates(h, prev)
}

// StateWords is a breaker state in the words the dashboard and the CLI
// use: "closed", "open", "half-open", "forced open", "forced closed";
// "no live instance" for "".
func StateWords(s string) string {
	switch s {
	case protocol.StateHalfOpen:
		return "half-open"
	case protocol.StateForcedOpen:
		return "forced open"
	case protocol.StateForcedClosed:
		return "forced closed"
	case "":
		return "no live instance"
	}
	return s
}

// InstancesText says how many live instances are in the dependency's
// state, as the tile does: "open on 2 of 6" ("no live instance of 3").
func InstancesText(d Dependency) string {
	live := max(d.Instances-d.Stale, 0)
	if d.State == "" || live == 0 {
		return "no live instance of " + strconv.Itoa(d.Instances)
	}
	return StateWords(d.State) + " on " + strconv.Itoa(d.ByState[d.State]) + " of " + strconv.Itoa(live)
}

// CellText is a shown rate for a column that names the rate: the label's
// qualifier, then the figure ("tripped at 55% of 50%", "12% of 50%").
func (r ShownRate) CellText() string {
	if _, q, ok := strings.Cut(r.Label, ", "); ok {
		return q + " " + r.Text
	}
	return r.Text
}

// SpanText is a duration to the second, as the dashboard, its script
// (web/static/app.js spanText) and the CLI print it: "45s", "3m12s", "2h05m", "3d4h".
func SpanText(d time.Duration) string {
	d = max(d, 0) / time.Second * time.Second
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}
