package web

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// InstanceHistory is the per-instance history the dependency page draws
// as a heatmap. *store.Store implements it; without it the page has no
// heatmap.
type InstanceHistory interface {
	InstanceHistory(ctx context.Context, q cbdash.InstanceHistoryQuery) ([]cbdash.InstanceMinute, error)
}

// heatKeep is how far back the per-instance history goes (the store's
// default retention); heatCols the most columns drawn.
const (
	heatKeep = 24 * time.Hour
	heatCols = 120
)

// heatmap builds the instances-against-time view of dependency d over sp
// (clipped to the last 24 h): worst instances first (most minutes not
// closed, then highest failure rate), templates.HeatPage per page (page
// is 0-based), with links keeping base's parameters.
func (s *Server) heatmap(ctx context.Context, d cbdash.Dependency, sp span, page int, base url.Values) (*templates.Heatmap, error) {
	ih := s.cfg.InstanceHistory
	if ih == nil {
		return nil, nil
	}
	from := sp.from
	if lim := sp.to.Add(-heatKeep); from.Before(lim) {
		from = lim
	}
	from = from.Truncate(time.Minute)
	mins, err := ih.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: d.Service, Breaker: d.Breaker, From: from, To: sp.to})
	if err != nil {
		return nil, err
	}
	h := heatmapModel(mins, d, from, sp.to, page, base)
	if len(mins) == 0 {
		return h, nil
	}
	trs, err := s.history.Transitions(ctx, cbdash.TransitionQuery{Service: d.Service, Breaker: d.Breaker, From: from, To: sp.to, Limit: heatTransitions})
	if err != nil {
		return nil, err
	}
	if len(trs) < heatTransitions { // all of them: the time not closed is exact
		summarizeNotClosed(h, notClosedFor(trs, mins, d, from, sp.to))
	}
	return h, nil
}

// heatTransitions is the most transitions read to tell each instance's
// time not closed; a span with more says only in how many minutes.
const heatTransitions = 10000

type heatInst struct {
	name                      string
	calls, failures, notClose int64
	minutes                   []cbdash.InstanceMinute
	// elsewhere: served by another collector (its line says so), whose
	// minutes this one reads once stored, about a minute late
	elsewhere bool
}

// notClosedFor is, per instance, how long its breaker was out of closed
// (open, half-open, forced) within [from, to], from the transitions of
// the span (every one of them, any order; equal times in the order
// stored) and the instance's minutes:
// before its first transition it was in that transition's From state;
// after its last, in its To state until the end of its last minute
// reported (or to). An instance without transitions was in its live
// state throughout its minutes when that state is not closed (an open
// that began before the span), else closed.
func notClosedFor(trs []cbdash.TransitionRecord, mins []cbdash.InstanceMinute, d cbdash.Dependency, from, to time.Time) map[string]time.Duration {
	first, last := map[string]time.Time{}, map[string]time.Time{}
	for _, m := range mins {
		if f, ok := first[m.Instance]; !ok || m.Start.Before(f) {
			first[m.Instance] = m.Start
		}
		if end := m.Start.Add(time.Minute); end.After(last[m.Instance]) {
			last[m.Instance] = end
		}
	}
	byInst := map[string][]cbdash.TransitionRecord{}
	for _, tr := range trs {
		byInst[tr.Instance] = append(byInst[tr.Instance], tr)
	}
	out := map[string]time.Duration{}
	for inst, lo := range first {
		lo, hi := later(lo, from), earlier(last[inst], to)
		list := byInst[inst]
		sort.Slice(list, func(i, j int) bool { // in the order they happened: one batch's share a millisecond
			if list[i].At != list[j].At {
				return list[i].At < list[j].At
			}
			return list[i].ID < list[j].ID
		})
		state := liveState(d, inst)
		if len(list) > 0 {
			state = list[0].From
		}
		var sum time.Duration
		at := lo
		for _, tr := range list {
			t := earlier(later(time.UnixMilli(tr.At), lo), hi)
			if state != protocol.StateClosed {
				sum += t.Sub(at)
			}
			at, state = t, tr.To
		}
		if state != protocol.StateClosed && hi.After(at) {
			sum += hi.Sub(at)
		}
		out[inst] = sum
	}
	return out
}

// liveState is inst's state in d now (closed when d does not list it).
func liveState(d cbdash.Dependency, inst string) string {
	for _, ib := range d.PerInstance {
		if ib.Instance == inst && ib.State != "" {
			return ib.State
		}
	}
	return protocol.StateClosed
}

// summarizeNotClosed puts each row's time not closed in its summary: a
// minute counts in "N min" when the breaker was out of closed at any
// moment of it, which for a breaker that alternates is most minutes, so
// the time itself comes first.
func summarizeNotClosed(h *templates.Heatmap, dur map[string]time.Duration) {
	for i, r := range h.Rows {
		d, ok := dur[r.Instance]
		head, tail, found := strings.Cut(r.Summary, ", not closed at some moment of ")
		if !ok || !found {
			continue
		}
		h.Rows[i].Summary = head + ", not closed " + wording.Span(d) + " in " + tail
	}
}

func (h *heatInst) rate() float64 {
	if h.calls == 0 {
		return 0
	}
	return 100 * float64(h.failures) / float64(h.calls)
}

func heatmapModel(mins []cbdash.InstanceMinute, d cbdash.Dependency, from, to time.Time, page int, base url.Values) *templates.Heatmap {
	n := int(to.Sub(from).Minutes() + 0.999)
	per := max(1, (n+heatCols-1)/heatCols) // minutes per column
	cols := max(1, (n+per-1)/per)
	h := &templates.Heatmap{Bucket: strconv.Itoa(per) + " min", Range: stamp(from) + " – " + stamp(to) + " UTC"}
	byName := map[string]*heatInst{}
	get := func(name string) *heatInst {
		if x := byName[name]; x != nil {
			return x
		}
		x := &heatInst{name: name}
		byName[name] = x
		return x
	}
	for _, ib := range d.PerInstance {
		get(ib.Instance).elsewhere = ib.Elsewhere
	}
	for _, m := range mins {
		x := get(m.Instance)
		x.calls += m.Calls
		x.failures += m.Failures
		if m.State != protocol.StateClosed {
			x.notClose++
		}
		x.minutes = append(x.minutes, m)
	}
	if len(mins) == 0 {
		h.Empty = true
		return h
	}
	insts := make([]*heatInst, 0, len(byName))
	for _, x := range byName {
		insts = append(insts, x)
	}
	sort.Slice(insts, func(i, j int) bool {
		a, b := insts[i], insts[j]
		if a.notClose != b.notClose {
			return a.notClose > b.notClose
		}
		if ra, rb := a.rate(), b.rate(); ra != rb {
			return ra > rb
		}
		return a.name < b.name
	})
	pages := (len(insts) + templates.HeatPage - 1) / templates.HeatPage
	page = min(max(page, 0), pages-1)
	lo, hi := page*templates.HeatPage, min(len(insts), (page+1)*templates.HeatPage)
	h.Shown = fmt.Sprintf("instances %d-%d of %d", lo+1, hi, len(insts))
	link := func(p int) string {
		q := url.Values{}
		for k, v := range base {
			q[k] = v
		}
		q.Set("hpage", strconv.Itoa(p))
		return "/dependency?" + q.Encode() + "#heatmap"
	}
	if page > 0 {
		h.Prev = link(page - 1)
	}
	if page < pages-1 {
		h.Next = link(page + 1)
	}
	w := 1000 / float64(cols)
	for _, x := range insts[lo:hi] {
		h.Rows = append(h.Rows, heatRow(x, from, per, cols, w))
	}
	for i := 0; i <= 4; i++ {
		c := cols * i / 4
		at := from.Add(time.Duration(c*per) * time.Minute)
		pos := float64(c) * w
		h.Ticks = append(h.Ticks, templates.Tick{Pos: min(max(pos, 20), 980), Label: at.UTC().Format("15:04")})
	}
	return h
}

func heatRow(x *heatInst, from time.Time, per, cols int, w float64) templates.HeatRow {
	type bucket struct {
		calls, failures int64
		rank            int
		seen            bool
	}
	bs := make([]bucket, cols)
	for i := range bs {
		bs[i].rank = cbdash.StateRank(protocol.StateClosed)
	}
	for _, m := range x.minutes {
		i := int(m.Start.Sub(from)/time.Minute) / per
		if i < 0 || i >= cols {
			continue
		}
		b := &bs[i]
		b.calls += m.Calls
		b.failures += m.Failures
		b.rank = min(b.rank, cbdash.StateRank(m.State))
		b.seen = true
	}
	row := templates.HeatRow{Instance: x.name,
		Summary: fmt.Sprintf("%s failed (%d/%d)", wording.Pct(x.rate()), x.failures, x.calls)}
	if x.elsewhere && len(x.minutes) == 0 {
		row.Summary = wording.Elsewhere + ": its minutes come about a minute late"
	}
	if x.notClose > 0 {
		// A minute counts when the breaker was out of closed at any
		// moment of it (the cell's worst state); summarizeNotClosed
		// puts the time itself first when it is known.
		row.Summary += fmt.Sprintf(", not closed at some moment of %d min", x.notClose)
	}
	for i, b := range bs {
		if !b.seen {
			continue
		}
		at := from.Add(time.Duration(i*per) * time.Minute).UTC().Format("15:04")
		rate := 0.0
		if b.calls > 0 {
			rate = 100 * float64(b.failures) / float64(b.calls)
		}
		class := "h-idle"
		state := protocol.StateClosed
		switch b.rank {
		case cbdash.StateRank(protocol.StateOpen):
			class, state = "h-open", protocol.StateOpen
		case cbdash.StateRank(protocol.StateHalfOpen):
			class, state = "h-half-open", protocol.StateHalfOpen
		case cbdash.StateRank(protocol.StateForcedOpen), cbdash.StateRank(protocol.StateForcedClosed):
			class, state = "h-forced", "forced"
		default:
			if b.calls > 0 {
				class = "h-f" + strconv.Itoa(rateLevel(rate))
			}
		}
		row.Cells = append(row.Cells, templates.HeatCell{X: float64(i) * w, W: w, Class: class,
			Title: fmt.Sprintf("%s %s UTC: %s, failure rate %s (%d of %d calls)", x.name, at, stateView(state).Text, wording.Pct(rate), b.failures, b.calls)})
	}
	return row
}

// rateLevel buckets a failure rate for the heatmap's closed cells.
func rateLevel(rate float64) int {
	switch {
	case rate <= 0:
		return 0
	case rate < 10:
		return 1
	case rate < 25:
		return 2
	case rate < 50:
		return 3
	}
	return 4
}
