package web

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"iter"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// stateView turns a protocol state into colour class and words.
func stateView(s string) templates.State {
	switch s {
	case protocol.StateClosed:
		return templates.State{Class: "closed", Text: "closed"}
	case protocol.StateOpen:
		return templates.State{Class: "open", Text: "open"}
	case protocol.StateHalfOpen:
		return templates.State{Class: "half-open", Text: "half-open"}
	case protocol.StateForcedOpen:
		return templates.State{Class: "forced-open", Text: "forced open"}
	case protocol.StateForcedClosed:
		return templates.State{Class: "forced-closed", Text: "forced closed"}
	case "":
		return templates.State{Class: "none", Text: "no live instance"}
	}
	return templates.State{Class: "none", Text: s}
}

func stateRank(s string) int { return cbdash.StateRank(s) }

// elementID is a stable, valid HTML id for any name: names may hold
// any character, so they are hashed.
func elementID(prefix, name string) string {
	sum := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(sum[:8])
}

func tileID(k cbdash.DependencyKey) string {
	return elementID("t-", k.Service+"\x00"+k.Breaker)
}

func depHref(k cbdash.DependencyKey) string {
	return "/dependency?service=" + url.QueryEscape(k.Service) + "&breaker=" + url.QueryEscape(k.Breaker)
}

func timeOfDay(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

func roughDuration(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// isoTime is t for the page's script (data-since, data-until) and
// <time datetime>: RFC 3339 in UTC with milliseconds.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// agoView is a moment shown as "7s ago" that ticks; nil for zero t.
func agoView(t, now time.Time) *templates.Since {
	if t.IsZero() {
		return nil
	}
	return &templates.Since{Clock: t.UTC().Format("15:04:05") + " UTC", For: wording.Span(now.Sub(t)), ISO: isoTime(t)}
}

// sinceView is "open since 10:02:11 UTC (3m12s)" for an episode that
// began at t in state (its words name the state); nil for zero t.
func sinceView(state string, t, now time.Time) *templates.Since {
	if t.IsZero() {
		return nil
	}
	label := "open since"
	if state == protocol.StateForcedOpen {
		label = "forced open since"
	} else if state == protocol.StateHalfOpen {
		label = "not closed since"
	}
	return &templates.Since{
		Label: label, Clock: t.UTC().Format("15:04:05") + " UTC", For: wording.Span(now.Sub(t)),
		ISO: isoTime(t),
	}
}

func holdView(h *cbdash.Hold, now time.Time) *templates.Hold {
	if h == nil {
		return nil
	}
	v := &templates.Hold{Action: incident.ActionText(h.Action) + "", Actor: h.Actor, Reason: h.Reason}
	if h.Action == protocol.ActionForceOpen {
		v.Action = "held open"
	} else if h.Action == protocol.ActionForceClosed {
		v.Action = "held closed"
	}
	if !h.Until.IsZero() {
		v.Until = h.Until.UTC().Format("15:04:05") + " UTC"
		v.In, v.UntilISO = wording.Span(h.Until.Sub(now)), isoTime(h.Until)
	}
	if id := holdIDOf(h.HoldID, h.CommandID); id != "" {
		v.HoldID, v.Href = id, holdHref(id)
	}
	return v
}

// rateView puts a rate beside its threshold (rateOf words it); the bar is the rate as a
// share of the threshold, warn from 70 %, bad from 100 %.
func rateView(label string, value, threshold float64) templates.Rate {
	r := templates.Rate{Label: label, Value: value, Big: wording.Pct(value), Threshold: threshold, Level: "ok"}
	if threshold <= 0 {
		return r
	}
	r.Fill = math.Min(100, 100*value/threshold)
	switch {
	case value >= threshold:
		r.Level = "bad"
	case value >= 0.7*threshold:
		r.Level = "warn"
	}
	return r
}

// liveCount is the number of instances that count in the state.
func liveCount(d cbdash.Dependency) int {
	n := d.Instances - d.Stale
	if n < 0 {
		return 0
	}
	return n
}

func staleText(d cbdash.Dependency) string {
	if d.Stale == 0 {
		return ""
	}
	return strconv.Itoa(d.Stale) + " stale"
}

func labelList(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// tile builds one overview tile.
func tile(d cbdash.Dependency, spark templates.Spark, causes map[string]protocol.Cause, now time.Time) templates.Tile {
	failure, slow := rates(d, causes)
	return templates.Tile{
		ID:           tileID(d.DependencyKey),
		Service:      d.Service,
		Breaker:      d.Breaker,
		Href:         depHref(d.DependencyKey),
		State:        stateView(d.State),
		Instances:    wording.Instances(d),
		Stale:        staleText(d),
		OpenSince:    sinceView(d.State, d.OpenSince, now),
		Admitted:     wording.PerSecond(d.AdmittedRate),
		Rejected:     wording.PerSecond(d.RejectedRate),
		Fallbacks:    fallbacksText(d.Recent),
		Failure:      failure,
		Slow:         slow,
		SlowLeads:    strings.HasSuffix(slow.Label, "tripped at"),
		P99:          wording.Latency(d.P99),
		Spark:        spark,
		OpensToday:   d.OpensToday,
		Held:         holdView(d.Held, now),
		Labels:       labelList(d.Labels),
		FallbackLast: fallbackLastText(d.Fallback, now),
	}
}

// fallbackLastText says when fallbacks last served calls an open or
// forced-open breaker rejected, and how well: "fallback last ran 12m ago:
// 86 % served (5178 of 5974)", or "fallback never ran (since the
// collector started)" for nil.
func fallbackLastText(fb *cbdash.FallbackRun, now time.Time) string {
	if fb == nil {
		return "fallback never ran (since the collector started)"
	}
	return fmt.Sprintf("fallback last ran %s ago: %.0f %% served (%d of %d)", wording.Span(max(0, now.Sub(fb.LastServed))),
		fb.SuccessShare, fb.Served, fb.Served+fb.Failed)
}

// fallbacksText is "120 served, 3 failed" for the fallbacks of c; ""
// when none ran.
func fallbacksText(c protocol.Counts) string {
	if c.FallbackSuccess == 0 && c.FallbackFailure == 0 {
		return ""
	}
	return strconv.FormatInt(c.FallbackSuccess, 10) + " served, " + strconv.FormatInt(c.FallbackFailure, 10) + " failed"
}

// rates are the failure and slow-call rates shown for a dependency, by
// the one rule of cbdash.RatesOf (the CLI and the JSON API show the
// same); causes adds the trips the live state did not see (after a
// restart, from the store).
func rates(d cbdash.Dependency, causes map[string]protocol.Cause) (failure, slow templates.Rate) {
	f, sl := cbdash.RatesOf(d, causes)
	return rateOf(f), rateOf(sl)
}

// rateOf draws a shown rate as a headroom bar: the rate as a share of
// its threshold, warn from 70 %, bad from 100 %, idle while not judged.
func rateOf(sr cbdash.ShownRate) templates.Rate {
	r := rateView(sr.Label, sr.Value, sr.Threshold)
	r.Text = wording.Rate(sr)
	if !sr.Judged {
		r.Level, r.Big = "idle", "–"
	}
	return r
}

// fleet counts dependencies by state and stale instances. An instance
// is counted once however many of its breakers are stale: distinct
// (service, instance) pairs over PerInstance. A dependency that carries
// more Stale than its stale PerInstance rows (no rows; or instances
// another collector serves, issue 36) counts the rest as that many
// instances of its service (the largest such number per service), never
// summed over breakers.
func fleet(deps []cbdash.Dependency) templates.Fleet {
	return fleetCount(len(deps), func(yield func(*cbdash.Dependency) bool) {
		for i := range deps {
			if !yield(&deps[i]) {
				return
			}
		}
	})
}

// fleetCount is fleet over the n dependencies deps yields (a live
// overview's, held by pointer: it copies none of them).
func fleetCount(n int, deps iter.Seq[*cbdash.Dependency]) templates.Fleet {
	f := templates.Fleet{Dependencies: n}
	type inst struct{ service, instance string }
	stale := map[inst]bool{}
	bare := map[string]int{} // service -> stale count of dependencies without rows
	for d := range deps {
		rowless := d.Stale // stale instances without a row: served by another collector (issue 36)
		for _, ib := range d.PerInstance {
			if ib.Stale {
				stale[inst{ib.Service, ib.Instance}] = true
				rowless--
			}
		}
		if rowless > 0 {
			bare[d.Service] = max(bare[d.Service], rowless)
		}
		if d.Fallback == nil {
			f.FallbackNever++
		}
		switch d.State {
		case protocol.StateOpen:
			f.Open++
		case protocol.StateHalfOpen:
			f.HalfOpen++
		case protocol.StateForcedOpen, protocol.StateForcedClosed:
			f.Forced++
		}
	}
	f.StaleInst = len(stale)
	for svc, n := range bare {
		known := 0
		for k := range stale {
			if k.service == svc {
				known++
			}
		}
		f.StaleInst += max(n-known, 0)
	}
	return f
}

// filter is the overview's query: service, state, label "k=v" (or "k"),
// a search string, the sort order, whether to group by service, and the
// page of tiles (1-based, tilesPerPage a page).
type filter struct {
	Service, State, Label, Q, Sort string
	Group                          bool
	Page                           int
}

// parseFilter reads the overview's query; a missing or bad page is 1.
func parseFilter(q url.Values) filter {
	page, _ := strconv.Atoi(q.Get("page"))
	f := filter{
		Service: q.Get("service"), State: q.Get("state"), Label: strings.TrimSpace(q.Get("label")),
		Q: strings.TrimSpace(q.Get("q")), Sort: q.Get("sort"), Group: q.Get("group") == "service",
		Page: max(page, 1),
	}
	switch f.Sort {
	case "name", "rate", "errors", "latency":
	default:
		f.Sort = "worst"
	}
	return f
}

func (f filter) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"service": f.Service, "state": f.State, "label": f.Label, "q": f.Q} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if f.Sort != "worst" {
		v.Set("sort", f.Sort)
	}
	if f.Group {
		v.Set("group", "service")
	}
	if f.Page > 1 {
		v.Set("page", strconv.Itoa(f.Page))
	}
	return v
}

func (f filter) match(d cbdash.Dependency) bool {
	if f.Service != "" && d.Service != f.Service {
		return false
	}
	if f.State != "" && stateView(d.State).Class != f.State {
		return false
	}
	if f.Label != "" {
		k, v, hasV := strings.Cut(f.Label, "=")
		got, ok := d.Labels[k]
		if !ok || (hasV && got != v) {
			return false
		}
	}
	if f.Q != "" {
		q := strings.ToLower(f.Q)
		if !strings.Contains(strings.ToLower(d.Service), q) && !strings.Contains(strings.ToLower(d.Breaker), q) {
			return false
		}
	}
	return true
}

// sortDeps sorts in place as the overview's sort how asks (pageOrder):
// worst first (state, then headroom, then name: the API's and the CLI's
// order too), by name, by request rate, by error rate (the failure rate
// of the last minute, highest first) or by latency (p99 of the last
// minute, highest first), the last two as Hystrix's dashboard sorts.
func sortDeps(deps []cbdash.Dependency, how string) {
	cbdash.SortDependencies(deps, pageOrder(how))
}

// pageOrder is the order (cbdash.Orders) of the overview's sort how, as
// its query names it (?sort=rate, errors, latency, name; worst or
// anything else: worst first).
func pageOrder(how string) string {
	switch how {
	case "name":
		return cbdash.OrderName
	case "rate":
		return cbdash.OrderRequestRate
	case "errors":
		return cbdash.OrderErrorRate
	case "latency":
		return cbdash.OrderP99
	}
	return cbdash.OrderWorst
}

// depLess is sortDeps' order.
func depLess(a, b *cbdash.Dependency, how string) bool {
	return cbdash.DependencyCompare(a, b, pageOrder(how)) < 0
}

// tilesPerPage is how many tiles the overview shows at once (as many
// instances as the dependency page lists), and so the most tiles one
// live overview message carries, whatever the fleet's size: a tile is
// 1.5-3.5 KB of HTML (its sparkline is most of it), a page of them
// 80-170 KB.
const tilesPerPage = 50

// overviewPage is the page of tiles a filter asks for.
type overviewPage struct {
	// Deps are the page's dependencies (at most tilesPerPage) in the
	// order shown: sorted as the filter asks; grouped by service, the
	// groups in the order of their first dependency, when it groups.
	Deps []*cbdash.Dependency
	// Page is the page shown (the filter's, at most Pages), Pages how
	// many there are (at least 1).
	Page, Pages int
	// Matched counts the dependencies the filter matches, Total every
	// dependency.
	Matched, Total int
	// Services are every dependency's services, sorted.
	Services []string
}

// pageOf filters and sorts all as f asks and cuts f's page out of them.
// It copies no dependency: Deps point at all's. Ungrouped, it keeps only
// the tiles up to the page's last as it goes (a heap of them), so the
// first pages of a large fleet cost a pass over it, not a sort.
func pageOf(all []*cbdash.Dependency, f filter) overviewPage {
	services := map[string]bool{}
	want := max(f.Page, 1) * tilesPerPage // tiles up to the page's last
	var rs []ranked
	matched := 0
	for _, d := range all {
		services[d.Service] = true
		if !f.match(*d) {
			continue
		}
		matched++
		r := ranked{d: d, worst: cbdash.WorstKeyOf(d)}
		if f.Group {
			rs = append(rs, r)
			continue
		}
		rs = keepFirst(rs, r, want, f.Sort)
	}
	sort.Slice(rs, func(i, j int) bool { return rankedLess(&rs[i], &rs[j], f.Sort) })
	if f.Group {
		first := map[string]int{}
		for i := range rs {
			g, ok := first[rs[i].d.Service]
			if !ok {
				g = len(first)
				first[rs[i].d.Service] = g
			}
			rs[i].group = g
		}
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].group < rs[j].group })
	}
	pages := max(1, (matched+tilesPerPage-1)/tilesPerPage)
	page := min(max(f.Page, 1), pages)
	from, to := (page-1)*tilesPerPage, min(matched, page*tilesPerPage)
	pg := overviewPage{Deps: make([]*cbdash.Dependency, 0, to-from), Page: page, Pages: pages, Matched: matched, Total: len(all)}
	for _, r := range rs[from:to] {
		pg.Deps = append(pg.Deps, r.d)
	}
	pg.Services = make([]string, 0, len(services))
	for s := range services {
		pg.Services = append(pg.Services, s)
	}
	sort.Strings(pg.Services)
	return pg
}

// ranked is a dependency with what sorting it takes, worked out once.
type ranked struct {
	d     *cbdash.Dependency
	worst cbdash.WorstKey
	group int
}

// rankedLess is depLess on ranked dependencies.
func rankedLess(a, b *ranked, how string) bool {
	if pageOrder(how) == cbdash.OrderWorst {
		if c := cbdash.CompareWorst(a.worst, b.worst); c != 0 {
			return c < 0
		}
	}
	return depLess(a.d, b.d, how)
}

// keepFirst adds r to top, a heap of at most n of the first dependencies
// in the order how (its root the last of them), and returns it.
func keepFirst(top []ranked, r ranked, n int, how string) []ranked {
	less := func(i, j int) bool { return rankedLess(&top[i], &top[j], how) }
	if len(top) < n {
		top = append(top, r)
		for i := len(top) - 1; i > 0; {
			p := (i - 1) / 2
			if !less(p, i) {
				break
			}
			top[p], top[i] = top[i], top[p]
			i = p
		}
		return top
	}
	if !rankedLess(&r, &top[0], how) {
		return top
	}
	top[0] = r
	for i := 0; ; {
		m := 2*i + 1
		if m >= len(top) {
			break
		}
		if c := m + 1; c < len(top) && less(m, c) {
			m = c
		}
		if !less(i, m) {
			break
		}
		top[i], top[m] = top[m], top[i]
		i = m
	}
	return top
}

// pointers points at each of deps.
func pointers(deps []cbdash.Dependency) []*cbdash.Dependency {
	ps := make([]*cbdash.Dependency, len(deps))
	for i := range deps {
		ps[i] = &deps[i]
	}
	return ps
}

// pager is the overview's line above its tiles when they take more than
// one page: which tiles are shown and links to the pages beside.
func pager(pg overviewPage, f filter) templates.TilePager {
	if pg.Pages <= 1 {
		return templates.TilePager{}
	}
	from := (pg.Page-1)*tilesPerPage + 1
	p := templates.TilePager{Showing: fmt.Sprintf("tiles %d-%d of %d", from, from+len(pg.Deps)-1, pg.Matched)}
	href := func(page int) string {
		g := f
		g.Page = page
		if q := g.values().Encode(); q != "" {
			return "/?" + q
		}
		return "/"
	}
	if pg.Page > 1 {
		p.PrevHref = href(pg.Page - 1)
	}
	if pg.Page < pg.Pages {
		p.NextHref = href(pg.Page + 1)
	}
	return p
}

// overviewModel makes the overview of page pg of the fleet fl, cut out
// by f (pageOf), into tiles.
func overviewModel(p templates.Page, pg overviewPage, fl templates.Fleet, f filter, sparks map[cbdash.DependencyKey]templates.Spark, tr trips, now time.Time) templates.Overview {
	v := templates.Overview{Page: p, Fleet: fl, Shown: pg.Matched, Total: pg.Total, Pager: pager(pg, f)}
	v.Filter = templates.Filter{Service: f.Service, State: f.State, Label: f.Label, Q: f.Q, Sort: f.Sort, Group: f.Group}
	for _, s := range pg.Services {
		v.Filter.Services = append(v.Filter.Services, templates.Option{Value: s, Text: s, Selected: s == f.Service})
	}
	for _, s := range []string{protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen, protocol.StateForcedClosed, protocol.StateClosed, ""} {
		sv := stateView(s)
		v.Filter.States = append(v.Filter.States, templates.Option{Value: sv.Class, Text: sv.Text, Selected: sv.Class == f.State})
	}
	for _, o := range [][2]string{{"worst", "worst first"}, {"name", "name"}, {"rate", "request rate"}, {"errors", "error rate"}, {"latency", "latency (p99)"}} {
		v.Filter.Sorts = append(v.Filter.Sorts, templates.Option{Value: o[0], Text: o[1], Selected: o[0] == f.Sort})
	}
	v.Groups = groupsOf(pg, f, sparks, tr, now)
	return v
}

// groupsOf draws page pg's tiles, in one untitled group or, when f
// groups, one group per service (pg.Deps come grouped).
func groupsOf(pg overviewPage, f filter, sparks map[cbdash.DependencyKey]templates.Spark, tr trips, now time.Time) []templates.Group {
	if len(pg.Deps) == 0 {
		return nil
	}
	tiles := make([]templates.Tile, len(pg.Deps))
	for i, d := range pg.Deps {
		tiles[i] = tile(*d, sparks[d.DependencyKey], tr[d.DependencyKey], now)
	}
	if !f.Group {
		return []templates.Group{{Tiles: tiles}}
	}
	var gs []templates.Group
	for i, t := range tiles {
		if n := len(gs); n == 0 || gs[n-1].Title != pg.Deps[i].Service {
			gs = append(gs, templates.Group{Title: pg.Deps[i].Service})
		}
		gs[len(gs)-1].Tiles = append(gs[len(gs)-1].Tiles, t)
	}
	return gs
}
