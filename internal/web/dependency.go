package web

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

// ranges a chart can cover; the store picks the roll-up for each.
var ranges = []struct {
	name string
	d    time.Duration
}{
	{"15m", 15 * time.Minute}, {"1h", time.Hour}, {"6h", 6 * time.Hour},
	{"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"30d", 30 * 24 * time.Hour},
}

// span is a chosen range: a preset (range, and end, Unix seconds, or
// now) or a custom one (from, and to or now), as [from, to).
type span struct {
	name     string // a preset's name, or "custom"
	from, to time.Time
	end      string // the "end" query value of a preset, "" = now
	// fromQ and toQ are a custom range's query values; a custom range
	// with no to ends now.
	fromQ, toQ string
}

// customTime is the layout of a custom range's from and to (the
// browser's datetime-local input, read as UTC); RFC 3339 and Unix
// seconds are accepted too.
const customTime = "2006-01-02T15:04"

func parseRangeTime(field, v string) (time.Time, error) {
	if t, err := time.Parse(customTime, v); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC(), nil
	}
	if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Time{}, errorf(cbdash.ErrInvalid, "%s must be a UTC time as 2006-01-02T15:04, RFC 3339 or Unix seconds (got %q)", field, v)
}

// maxCustomRange bounds a custom range, as the longest preset does.
const maxCustomRange = 30 * 24 * time.Hour

// parseSpan reads a custom range (from, to) or a preset: range (default
// def) and end (Unix seconds, default now).
func parseSpan(q url.Values, def string, now time.Time) (span, error) {
	if f := q.Get("from"); f != "" {
		sp := span{name: "custom", to: now, fromQ: f, toQ: q.Get("to")}
		var err error
		if sp.from, err = parseRangeTime("from", f); err != nil {
			return span{}, err
		}
		if sp.toQ != "" {
			if sp.to, err = parseRangeTime("to", sp.toQ); err != nil {
				return span{}, err
			}
		}
		if !sp.from.Before(sp.to) {
			return span{}, errorf(cbdash.ErrInvalid, "from must be before to")
		}
		if sp.to.Sub(sp.from) > maxCustomRange {
			return span{}, errorf(cbdash.ErrInvalid, "from to to spans more than 30 days")
		}
		return sp, nil
	}
	sp := span{name: q.Get("range"), to: now}
	if sp.name == "" {
		sp.name = def
	}
	var d time.Duration
	for _, r := range ranges {
		if r.name == sp.name {
			d = r.d
		}
	}
	if d == 0 {
		return span{}, errorf(cbdash.ErrInvalid, "range %q is not one of 15m, 1h, 6h, 24h, 7d, 30d", sp.name)
	}
	if e := q.Get("end"); e != "" {
		sec, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return span{}, errorf(cbdash.ErrInvalid, "end must be Unix seconds")
		}
		sp.to, sp.end = time.Unix(sec, 0), e
	}
	sp.from = sp.to.Add(-d)
	return sp, nil
}

// endsNow reports whether the range ends at the present (and moves with
// the clock).
func (sp span) endsNow() bool { return sp.end == "" && sp.toQ == "" }

// at is the range moved to now when it ends now: a preset keeps its
// length, a custom range its start.
func (sp span) at(now time.Time) span {
	if !sp.endsNow() {
		return sp
	}
	if sp.fromQ == "" {
		sp.from = now.Add(sp.from.Sub(sp.to))
	}
	sp.to = now
	return sp
}

// values are the range's query parameters.
func (sp span) values() url.Values {
	v := url.Values{}
	if sp.fromQ != "" {
		v.Set("from", sp.fromQ)
		if sp.toQ != "" {
			v.Set("to", sp.toQ)
		}
		return v
	}
	v.Set("range", sp.name)
	if sp.end != "" {
		v.Set("end", sp.end)
	}
	return v
}

// startAtData starts a range that ends now at the first of pts (whole
// minute) when the history begins well after the range does: 12 minutes
// of data fill the charts instead of their right fifth. The range
// becomes a custom one from then on.
func (sp span) startAtData(pts []cbdash.Point) span {
	if !sp.endsNow() || sp.fromQ != "" || len(pts) == 0 {
		return sp
	}
	first := pts[0].At.UTC().Truncate(time.Minute)
	if first.Sub(sp.from) < sp.to.Sub(sp.from)/10 {
		return sp
	}
	sp.name, sp.from = "custom", first
	sp.fromQ = first.Format(time.RFC3339)
	return sp
}

func (sp span) text() string {
	return stamp(sp.from) + " – " + stamp(sp.to) + " UTC"
}

// customForm is the from/to form beside the presets, filled with sp;
// chosen says the user picked the custom range (not the default range
// started at the data).
func customForm(path string, base url.Values, sp span, chosen bool) templates.CustomRange {
	f := templates.CustomRange{Action: path, From: sp.from.UTC().Format(customTime), To: sp.to.UTC().Format(customTime), Current: chosen}
	for k, vs := range base {
		for _, v := range vs {
			f.Hidden = append(f.Hidden, templates.Option{Value: v, Text: k})
		}
	}
	slices.SortFunc(f.Hidden, func(a, b templates.Option) int { return strings.Compare(a.Text, b.Text) })
	if sp.endsNow() {
		f.To = ""
	}
	return f
}

// viewFields carry the page's range through the operator's confirm and
// command, so the page comes back on it.
func viewFields(sp span) []templates.Option {
	var out []templates.Option
	for _, k := range []string{"range", "end", "from", "to"} {
		if v := sp.values().Get(k); v != "" {
			out = append(out, templates.Option{Text: k, Value: v})
		}
	}
	return out
}

// rangeLinks links every range, keeping base's other parameters.
func rangeLinks(path string, base url.Values, cur string) []templates.Link {
	var out []templates.Link
	for _, r := range ranges {
		q := url.Values{}
		for k, v := range base {
			q[k] = v
		}
		q.Set("range", r.name)
		out = append(out, templates.Link{Href: path + "?" + q.Encode(), Text: r.name, Current: r.name == cur})
	}
	return out
}

func keyOf(c echo.Context) (cbdash.DependencyKey, error) {
	k := cbdash.DependencyKey{Service: c.QueryParam("service"), Breaker: c.QueryParam("breaker")}
	if c.Request().Method == http.MethodPost {
		k = cbdash.DependencyKey{Service: c.FormValue("service"), Breaker: c.FormValue("breaker")}
	}
	if k.Service == "" || k.Breaker == "" {
		return k, errorf(cbdash.ErrInvalid, "service and breaker are required")
	}
	return k, nil
}

// dependency renders one dependency; unknown ones are a 404.
func (s *Server) dependency(c echo.Context) error {
	ctx := c.Request().Context()
	k, err := keyOf(c)
	if err != nil {
		return err
	}
	sp, err := parseSpan(c.QueryParams(), "1h", s.now())
	if err != nil {
		return err
	}
	d, err := s.col.Dependency(k)
	if err != nil {
		return err
	}
	pts, err := s.history.History(ctx, cbdash.HistoryQuery{DependencyKey: k, From: sp.from, To: sp.to})
	if err != nil {
		return err
	}
	if c.QueryParam("range") == "" {
		sp = sp.startAtData(pts) // the default range shows the data
	}
	gaps, err := s.gaps(ctx, cbdash.HistoryQuery{DependencyKey: k, From: sp.from, To: sp.to})
	if err != nil {
		return err
	}
	trs, err := s.transitionRows(ctx, k, sp)
	if err != nil {
		return err
	}
	cmds, err := s.depCommands(ctx, k)
	if err != nil {
		return err
	}
	causes := s.trips(ctx, []cbdash.Dependency{d})[k]
	base := url.Values{"service": {k.Service}, "breaker": {k.Breaker}}
	p := s.page(c, k.String(), "overview")
	live := sp.values()
	live.Set("view", "dependency")
	live.Set("service", k.Service)
	live.Set("breaker", k.Breaker)
	pagingOf(c.QueryParams()).values(live)
	p.LiveURL = "/live?" + live.Encode()
	v := templates.Dependency{
		Page: p, Service: k.Service, Breaker: k.Breaker,
		Header:      depHeader(d, causes, s.now()),
		Ranges:      rangeLinks("/dependency", base, sp.name),
		RangeText:   sp.text(),
		Misuse:      misuseIn(pts),
		Custom:      customForm("/dependency", base, sp, c.QueryParam("from") != ""),
		Charts:      dependencyChartsWithGaps(pts, gaps, sp.from, sp.to, d),
		Instances:   instanceTable(d, causes, s.now(), pagingOf(c.QueryParams()), c.QueryParams()),
		Transitions: trs,
		Commands:    cmds,
		AuditHref:   "/audit?" + url.Values{"service": {k.Service}}.Encode(),
	}
	if p.CanOp {
		v.Operator = operatorForm(p.CSRF, d)
		v.Operator.MaxTTL, v.Operator.MaxHold = int(s.maxHold()/time.Minute), holdText(s.maxHold())
		v.Operator.View = viewFields(sp)
		if hs, err := s.holdService(); err == nil {
			v.Operator.DefaultStops = stopsText(hs.DefaultStops())
		}
	}
	if v.Holds, err = s.depHolds(ctx, d, p); err != nil {
		return err
	}
	hpage, _ := strconv.Atoi(c.QueryParam("hpage"))
	hbase := url.Values{} // the page's own query (its range, preset or custom), another heatmap page
	for name, v := range c.QueryParams() {
		if name != "hpage" {
			hbase[name] = v
		}
	}
	if v.Heatmap, err = s.heatmap(ctx, d, sp, hpage, hbase); err != nil {
		return err
	}
	if v.Shadows, err = s.shadowLanes(ctx, d, sp); err != nil { // shadows.go
		return err
	}
	v.Tune = s.tunePanel(c, k, sp.from, sp.to) // tune.go
	return render(c, http.StatusOK, templates.DependencyPage(v))
}

// depHeader is the dependency page's header; its rates follow rates, so
// they agree with the instance rows (instanceRows) of the same causes.
func depHeader(d cbdash.Dependency, causes map[string]protocol.Cause, now time.Time) templates.DepHeader {
	failure, slow := rates(d, causes)
	return templates.DepHeader{
		State:        stateView(d.State),
		Instances:    wording.Instances(d),
		Stale:        staleText(d),
		OpenSince:    sinceView(d.State, d.OpenSince, now),
		Held:         holdView(d.Held, now),
		Admitted:     wording.PerSecond(d.AdmittedRate),
		Rejected:     wording.PerSecond(d.RejectedRate),
		Fallbacks:    fallbacksText(d.Recent),
		Failure:      failure,
		Slow:         slow,
		P50:          wording.Latency(d.P50),
		P99:          wording.Latency(d.P99),
		OpensToday:   d.OpensToday,
		Labels:       labelList(d.Labels),
		FallbackLast: fallbackLastText(d.Fallback, now),
	}
}

// instancesPerPage is how many instances the dependency page lists at
// once: the odd ones first (instancePage).
const instancesPerPage = 50

// instancePaging is which instances the table shows: page Page (1-based)
// of instancesPerPage, or all of them.
type instancePaging struct {
	Page int
	All  bool
}

// pagingOf reads ipage and iall from a query (a bad or missing ipage is 1).
func pagingOf(q url.Values) instancePaging {
	p, _ := strconv.Atoi(q.Get("ipage"))
	return instancePaging{Page: max(p, 1), All: q.Get("iall") == "1"}
}

// values sets ipage and iall in q (removing them at their defaults).
func (pg instancePaging) values(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	q.Del("ipage")
	q.Del("iall")
	if pg.All {
		q.Set("iall", "1")
	} else if pg.Page > 1 {
		q.Set("ipage", strconv.Itoa(pg.Page))
	}
	return q
}

// oddFirst orders d's instances as an on-call engineer reads them: live
// instances open, half-open or forced first (by state), then stale ones,
// then the rest; within each, the highest failure rate of the last
// window report first, then by name.
func oddFirst(ins []*cbdash.InstanceBreaker) []*cbdash.InstanceBreaker {
	out := slices.Clone(ins)
	group := func(in *cbdash.InstanceBreaker) int {
		switch {
		case !in.Stale && cbdash.NotClosed(in.State):
			return 0
		case in.Stale:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b *cbdash.InstanceBreaker) int {
		if ga, gb := group(a), group(b); ga != gb {
			return ga - gb
		}
		if ra, rb := cbdash.StateRank(a.State), cbdash.StateRank(b.State); ra != rb {
			return ra - rb
		}
		if fa, fb := a.Last.Headroom.FailureRate, b.Last.Headroom.FailureRate; fa != fb {
			if fa > fb {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Instance, b.Instance)
	})
	return out
}

// instanceTable is the dependency page's instance table: one page of the
// instances, odd ones first (oddFirst), with links to the next and
// previous pages and to all of them; base is the page's own query.
func instanceTable(d cbdash.Dependency, causes map[string]protocol.Cause, now time.Time, pg instancePaging, base url.Values) templates.InstanceTable {
	ins := oddFirst(d.PerInstance)
	n := len(ins)
	t := templates.InstanceTable{Total: n}
	from, to := 0, n
	if !pg.All {
		pages := max(1, (n+instancesPerPage-1)/instancesPerPage)
		page := min(pg.Page, pages)
		from, to = (page-1)*instancesPerPage, min(n, page*instancesPerPage)
		href := func(p instancePaging) string {
			return "/dependency?" + p.values(maps.Clone(base)).Encode() + "#dep-instances"
		}
		if page > 1 {
			t.PrevHref = href(instancePaging{Page: page - 1})
		}
		if page < pages {
			t.NextHref = href(instancePaging{Page: page + 1})
		}
		if pages > 1 {
			t.AllHref = href(instancePaging{All: true})
		}
	} else if n > instancesPerPage {
		t.FirstHref = "/dependency?" + instancePaging{Page: 1}.values(maps.Clone(base)).Encode() + "#dep-instances"
	}
	d.PerInstance = ins[from:to]
	t.Rows = instanceRows(d, causes, now)
	if n > 0 {
		t.Showing = fmt.Sprintf("%d-%d of %d instances, open, half-open and forced first, then the highest failure rate", from+1, to, n)
	}
	return t
}

// instanceRows are the instance table's rows. Rates are the instance's
// sliding window; an open or half-open instance whose trip is in causes
// shows the rates at its trip instead ("tripped at 52% of 50%"), since
// its window restarts empty when it opens.
func instanceRows(d cbdash.Dependency, causes map[string]protocol.Cause, now time.Time) []templates.InstanceRow {
	rows := make([]templates.InstanceRow, 0, len(d.PerInstance))
	drift := driftTexts(d)
	for _, in := range d.PerInstance {
		w := in.Last
		var adm, rej float64
		if w.Millis > 0 {
			adm = float64(w.Counts.Admitted) / (float64(w.Millis) / 1000)
			rej = float64(w.Counts.Rejected()) / (float64(w.Millis) / 1000)
		}
		var cause *protocol.Cause
		if c, ok := causes[in.Instance]; ok {
			cause = &c
		}
		f, sl := cbdash.InstanceRatesOf(*in, cause)
		failure, slow := wording.RateCell(f), wording.RateCell(sl)
		admitted, rejected := wording.PerSecond(adm), wording.PerSecond(rej)
		if in.Elsewhere { // no window here: its calls and rates are on the collector serving it
			admitted, rejected = "", ""
			failure, slow = judgedOnly(f, failure), judgedOnly(sl, slow)
		}
		rows = append(rows, templates.InstanceRow{
			Instance:       in.Instance,
			State:          stateView(in.State),
			Stale:          in.Stale,
			Admitted:       admitted,
			Rejected:       rejected,
			Failure:        failure,
			Slow:           slow,
			LastTransition: agoView(in.LastTransition, now),
			OpenSince:      sinceView(in.State, in.OpenSince, now),
			LastSeen:       agoView(in.LastSeen, now),
			Config:         configText(*in.Config),
			ConfigDiffers:  in.ConfigDiffers || drift[in.Instance] != "",
			ConfigDrift:    drift[in.Instance],
			Held:           holdView(in.Held, now),
			Sampled:        sampledText(*in.Config),
			Estimated:      estimatedText(*in.Config),
			Hosts:          hostsText(in.Last),
			Elsewhere:      elsewhereText(in),
		})
	}
	return rows
}

// judgedOnly is text, the words of rate r, when r is judged (a rate at a
// known trip), else "".
func judgedOnly(r cbdash.ShownRate, text string) string {
	if r.Judged {
		return text
	}
	return ""
}

// elsewhereText explains an instance served by another collector ("" for
// one served here): its window, so its calls and rates, are known only
// there (cbdash.InstanceBreaker.Elsewhere).
func elsewhereText(in *cbdash.InstanceBreaker) string {
	if !in.Elsewhere {
		return ""
	}
	return wording.ElsewhereTitle
}

// sampledText explains a breaker whose state a source samples ("" for one
// that pushes its transitions).
func sampledText(c protocol.BreakerConfig) string {
	if !c.Sampled {
		return ""
	}
	return "state sampled from " + c.Library + " at each read, not pushed: a transition is seen at the next read, " +
		"a short one between two reads is missed, and half-open may show as open"
}

// estimatedText explains a breaker whose counts a source estimates ("" for
// one whose counts are its own).
func estimatedText(c protocol.BreakerConfig) string {
	if !c.Estimated {
		return ""
	}
	return "counts estimated from the rolling counts of " + c.Library + ", which tell the calls of a sliding window, not each call: " +
		"the calls new at each read are recovered from the window's buckets (see the README for how close they come)"
}

// hostsText is the hosts a cluster's instance stands for ("" for one
// instance's).
func hostsText(w *protocol.Window) string {
	if w == nil {
		return ""
	}
	return wording.Hosts(w.Hosts)
}

// configText is a breaker's configuration in words; a breaker of another
// library (fed by an adapter) shows the library and its own settings,
// then whatever of ours it has.
func configText(c protocol.BreakerConfig) string {
	if c.Library != "" {
		s := c.Library
		if !c.Settings.IsZero() {
			s += ": " + c.Settings.String()
		}
		if c.WindowKind != "" {
			s += " (as cbdash reads it: " + nativeConfigText(c) + ")"
		}
		return s
	}
	return nativeConfigText(c)
}

func nativeConfigText(c protocol.BreakerConfig) string {
	win := strconv.Itoa(c.WindowSize) + " calls"
	if c.WindowKind == "time" {
		win = (time.Duration(c.WindowMillis) * time.Millisecond).String()
	}
	s := "window " + win + ", failures ≥ " + wording.Pct(c.FailureRateThreshold) + ", min " + strconv.Itoa(c.MinimumCalls) +
		" calls, open " + (time.Duration(c.OpenDurationMillis) * time.Millisecond).String()
	if c.SlowCallDurationMillis > 0 {
		s += ", slow > " + (time.Duration(c.SlowCallDurationMillis) * time.Millisecond).String() + " ≥ " + wording.Pct(c.SlowCallRateThreshold)
	}
	return s
}

// transitionRows reads the newest transitions of a dependency in sp.
func (s *Server) transitionRows(ctx context.Context, k cbdash.DependencyKey, sp span) ([]templates.TransitionRow, error) {
	recs, err := s.history.Transitions(ctx, cbdash.TransitionQuery{Service: k.Service, Breaker: k.Breaker, From: sp.from, To: sp.to.Add(time.Minute), Limit: 200})
	if err != nil {
		return nil, err
	}
	shadow, err := s.shadowTransitions(ctx, cbdash.TransitionQuery{Service: k.Service, Breaker: k.Breaker, From: sp.from, To: sp.to.Add(time.Minute), Limit: 200})
	if err != nil {
		return nil, err
	}
	// Newest first, live and shadow interleaved (a live one first at the
	// same millisecond), at most 200 of each.
	rows := make([]templates.TransitionRow, 0, len(recs)+len(shadow))
	for len(recs) > 0 || len(shadow) > 0 {
		if len(shadow) == 0 || (len(recs) > 0 && recs[0].At >= shadow[0].At) {
			r := recs[0]
			recs = recs[1:]
			rows = append(rows, templates.TransitionRow{
				At: stamp(time.UnixMilli(r.At)), Instance: r.Instance,
				From: stateView(r.From), To: stateView(r.To), Cause: causeText(r.Transition),
			})
			continue
		}
		rows = append(rows, shadowRow(shadow[0]))
		shadow = shadow[1:]
	}
	return rows, nil
}

// causeText explains a transition in words.
func causeText(t protocol.Transition) string {
	c := t.Cause
	switch c.Kind {
	case protocol.CauseFailureRate:
		return "failure rate " + wording.Pct(c.FailureRate) + " reached the " + wording.Pct(c.Threshold) + " threshold (" +
			strconv.FormatInt(c.WindowFailed, 10) + " of " + strconv.FormatInt(c.WindowCalls, 10) + " calls failed)" + openFor(t)
	case protocol.CauseSlowCallRate:
		return "slow-call rate " + wording.Pct(c.SlowCallRate) + " reached the " + wording.Pct(c.Threshold) + " threshold (" +
			strconv.FormatInt(c.WindowSlow, 10) + " of " + strconv.FormatInt(c.WindowCalls, 10) + " calls slow)" + openFor(t)
	case protocol.CauseOpenElapsed:
		return "open duration passed, probing"
	case protocol.CauseProbeFailed:
		return "probe failed (" + c.ProbeOutcome + ")" + openFor(t)
	case protocol.CauseProbesSucceeded:
		return "probes succeeded"
	case protocol.CauseCommand:
		s := "command " + incident.ActionText(c.Action) + " by " + c.Actor
		if c.Reason != "" {
			s += ": " + c.Reason
		}
		return s
	case protocol.CauseAgentCommand:
		return incident.AgentCommandText(c)
	case protocol.CauseQuorum:
		return incident.QuorumText(c)
	case protocol.CauseExpired:
		return "forced state expired"
	case protocol.CauseSampled:
		return "seen at a read of the source (sampled)"
	}
	return c.Kind
}

func openFor(t protocol.Transition) string {
	if t.OpenMillis <= 0 {
		return ""
	}
	return "; opens for " + (time.Duration(t.OpenMillis) * time.Millisecond).String() // the planned open duration, not time spent
}

func operatorForm(csrf string, d cbdash.Dependency) *templates.OperatorForm {
	f := &templates.OperatorForm{CSRF: csrf, Service: d.Service, Breaker: d.Breaker, Live: liveCount(d), DefaultTTL: 15,
		MaxTTL: int(cbdash.DefaultMaxHold / time.Minute), MaxHold: holdText(cbdash.DefaultMaxHold)}
	f.Unsupported, _ = unsupportedText(d)
	for _, in := range d.PerInstance {
		text := in.Instance + " (" + stateView(in.State).Text + ")"
		if in.Stale {
			text += ", stale"
		}
		f.Instances = append(f.Instances, templates.Option{Value: in.Instance, Text: text})
	}
	return f
}
