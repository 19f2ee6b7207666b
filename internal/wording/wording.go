// Package wording is the words and numbers a person reads: percentages,
// rates against their thresholds, calls per second, latencies, spans of
// time and breaker states, as the dashboard (internal/web), the CLI
// (cmd/cbdash) and the JSON API print them, in one place so the three
// never disagree. The rules behind the figures (which rate is shown, how
// close a window is to opening, what a state means) are the root
// package's (cbdash.RatesOf, cbdash.ClosenessOf); this package only says
// them. The page's script says spans the same way (web/static/app.js
// spanText).
//
// The collector keeps no text in its views: a shown rate's words
// (cbdash.ShownRate.Text) are made where they are shown, by Rate, and
// for the JSON API by Worded.
package wording

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Pct is a percentage: whole numbers without decimals ("50%"), others
// with one ("12.5%").
func Pct(v float64) string {
	var buf [32]byte
	return string(AppendPct(buf[:0], v))
}

// AppendPct appends Pct(v) to b.
func AppendPct(b []byte, v float64) []byte {
	if v == math.Trunc(v) {
		if v >= 0 && v < 1e15 && !math.Signbit(v) {
			// A whole number, as AppendFloat(v, 'f', 0) writes it, faster.
			return append(strconv.AppendInt(b, int64(v), 10), '%')
		}
		return append(strconv.AppendFloat(b, v, 'f', 0, 64), '%')
	}
	return append(strconv.AppendFloat(b, v, 'f', 1, 64), '%')
}

// Span is a duration to the second: "45s", "3m12s", "2h05m", "3d4h";
// a negative one is "0s".
func Span(d time.Duration) string {
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

// FallbackCalls is the one way pages, exports and the CLI word fallback
// counts: "2467 (1665 served, 802 failed)", fallback calls (each run of
// a fallback, for a rejected or a failed call) of which served (the
// fallback returned an answer: the API's `fallback.served`,
// protocol.Counts.FallbackSuccess) and failed.
func FallbackCalls(served, failed int64) string {
	return fmt.Sprintf("%d (%d served, %d failed)", served+failed, served, failed)
}

// State is a breaker state (protocol.State*) in words: "closed", "open",
// "half-open", "forced open", "forced closed"; "no live instance" for "".
func State(s string) string {
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

// Instances says how many live instances are in the dependency's state,
// as the tile does: "open on 2 of 6" ("no live instance of 3"). When a
// live instance stands for a cluster's hosts (a Turbine stream: its last
// window report counts them, protocol.Window.Hosts), it counts the hosts
// instead, in the cluster's words: "open on 1 of 2 hosts" (an instance of
// one host counting as one).
func Instances(d cbdash.Dependency) string {
	live := max(d.Instances-d.Stale, 0)
	if d.State == "" || live == 0 {
		return "no live instance of " + strconv.Itoa(d.Instances)
	}
	if in, of, ok := hostsIn(d); ok {
		return State(d.State) + " on " + strconv.FormatInt(in, 10) + " of " + strconv.FormatInt(of, 10) + " hosts"
	}
	return State(d.State) + " on " + strconv.Itoa(d.ByState[d.State]) + " of " + strconv.Itoa(live)
}

// hostsIn counts the hosts of d's live instances (in of them in d's
// state), when one of them is a cluster's (ok). A live member d has no
// line of (served by another collector, issue 36: d's counts are the
// fleet's, its lines this collector's) counts as one host, in d's state
// as d.ByState counts it.
func hostsIn(d cbdash.Dependency) (in, of int64, ok bool) {
	var lines, linesIn int64 // live lines, and those in d's state
	defer func() {
		of += max(int64(d.Instances-d.Stale)-lines, 0)
		in += max(int64(d.ByState[d.State])-linesIn, 0)
	}()
	for _, ib := range d.PerInstance {
		if ib.Stale {
			continue
		}
		lines++
		if ib.State == d.State {
			linesIn++
		}
		if ib.Last == nil || ib.Last.Hosts == nil {
			of++
			if ib.State == d.State {
				in++
			}
			continue
		}
		ok = true
		h := ib.Last.Hosts
		of += h.Total
		switch {
		case d.State == protocol.StateOpen && ib.State == protocol.StateOpen:
			in += h.Open
		case ib.State == d.State:
			in += h.Total
		}
	}
	return in, of, ok
}

// Hosts says what hosts a cluster's window report stands for: "cluster of
// 2 hosts, 1 open"; "" for one instance's (hosts nil).
func Hosts(h *protocol.Hosts) string {
	if h == nil {
		return ""
	}
	s := "cluster of " + strconv.FormatInt(h.Total, 10) + " hosts"
	if h.Total == 1 {
		s = "cluster of 1 host"
	}
	if h.Open > 0 {
		s += ", " + strconv.FormatInt(h.Open, 10) + " open"
	}
	return s
}

// NotJudged says why a sliding window's rates are not judged yet: "1 of
// 20 calls" (or "no calls").
func NotJudged(calls, minimumCalls int64) string {
	if calls == 0 {
		return "no calls"
	}
	return fmt.Sprintf("%d of %d calls", calls, minimumCalls)
}

// Rate is a shown rate's figure in words: "55% of 50%", "12.5% (no
// threshold)", "not judged yet (1 of 20 calls)". A rate that carries its
// words already (r.Text, as the JSON API gives it) is those words; one
// never computed (no Label) is "".
func Rate(r cbdash.ShownRate) string {
	if r.Text != "" || r.Label == "" {
		return r.Text
	}
	if !r.Judged {
		return "not judged yet (" + NotJudged(r.Calls, r.MinimumCalls) + ")"
	}
	var buf [64]byte
	b := AppendPct(buf[:0], r.Value)
	if r.Threshold <= 0 {
		b = append(b, " (no threshold)"...)
	} else {
		b = AppendPct(append(b, " of "...), r.Threshold)
	}
	return string(b)
}

// RateCell is a shown rate for a column that names the rate: the
// label's qualifier, then the figure ("tripped at 55% of 50%", "12% of
// 50%").
func RateCell(r cbdash.ShownRate) string {
	if _, q, ok := strings.Cut(r.Label, ", "); ok {
		return q + " " + Rate(r)
	}
	return Rate(r)
}

// Elsewhere is what a page, the CLI and the JSON API (ShownRate.Text)
// say of the calls and rates of an instance served by another collector
// (cbdash.InstanceBreaker.Elsewhere): they are known only there.
const Elsewhere = "on another collector"

// ElsewhereTitle explains Elsewhere where there is room (a title).
const ElsewhereTitle = "served by another collector: its state and last-seen time are the store's; " +
	"its calls and rates are known only on the collector it reports to (its dashboard, or this page's tile, which counts them)"

// PerSecond is a number of calls per second: "0/s", "2.50/s", "12.5/s",
// "1.2k/s".
func PerSecond(v float64) string {
	switch {
	case v == 0:
		return "0/s"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64) + "/s"
	case v < 1000:
		return strconv.FormatFloat(v, 'f', 1, 64) + "/s"
	}
	return strconv.FormatFloat(v/1000, 'f', 1, 64) + "k/s"
}

// Latency is a latency: "850 µs", "120 ms", "1.25 s"; none (0 or less)
// is the en dash "–" (the CLI prints "-" instead).
func Latency(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + " µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
}

// Worded is d as the JSON API serves it: its shown rates and those of
// every instance line with their words (ShownRate.Text, see Rate; a
// rate not judged of a line served by another collector is Elsewhere,
// its window being known only there). The
// collector's views carry none; d's lines are shared and read-only, so a
// line is copied before its words are set (d's PerInstance slice is
// replaced, never changed).
func Worded(d cbdash.Dependency) cbdash.Dependency {
	d.Shown = wordedRates(d.Shown)
	if len(d.PerInstance) == 0 {
		return d
	}
	lines := make([]cbdash.InstanceBreaker, len(d.PerInstance))
	ptrs := make([]*cbdash.InstanceBreaker, len(d.PerInstance))
	for i, in := range d.PerInstance {
		lines[i] = *in
		lines[i].Shown = wordedRates(in.Shown)
		if in.Elsewhere { // no window here: say so, not "not judged yet (no calls)"
			for _, r := range []*cbdash.ShownRate{&lines[i].Shown.Failure, &lines[i].Shown.Slow} {
				if !r.Judged {
					r.Text = Elsewhere
				}
			}
		}
		ptrs[i] = &lines[i]
	}
	d.PerInstance = ptrs
	return d
}

func wordedRates(r cbdash.ShownRates) cbdash.ShownRates {
	r.Failure.Text, r.Slow.Text = Rate(r.Failure), Rate(r.Slow)
	return r
}
