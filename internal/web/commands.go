package web

import (
	"context"
	"math"
	"net/http"
	"net/url"
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

// commandForm is the operator form as posted (to confirm, then issue).
type commandForm struct {
	key      cbdash.DependencyKey
	action   string
	scope    string // all, instance, share
	instance string
	share    float64
	ttlMin   int
	reason   string
}

// parseCommandForm validates the form; errors wrap cbdash.ErrInvalid and
// name the field.
//
// maxHold is the longest force accepted (a force is a hold: --max-hold):
// a longer expiry is refused here, before the confirmation page.
func parseCommandForm(c echo.Context, maxHold time.Duration) (commandForm, error) {
	k, err := keyOf(c)
	if err != nil {
		return commandForm{}, err
	}
	f := commandForm{key: k, action: c.FormValue("action"), scope: c.FormValue("scope"),
		instance: c.FormValue("instance"), reason: strings.TrimSpace(c.FormValue("reason"))}
	if !protocol.ValidAction(f.action) {
		return f, errorf(cbdash.ErrInvalid, "action: choose force open, force closed, release or reset")
	}
	if f.reason == "" {
		return f, errorf(cbdash.ErrInvalid, "reason is required")
	}
	if len(f.reason) > 500 {
		return f, errorf(cbdash.ErrInvalid, "reason is longer than 500 bytes")
	}
	if err := cbdash.CheckText("reason", f.reason, false); err != nil {
		return f, err
	}
	switch f.scope {
	case "all", "":
		f.scope = "all"
	case "instance":
		if f.instance == "" {
			return f, errorf(cbdash.ErrInvalid, "instance is required for scope instance")
		}
	case "share":
		v, err := strconv.ParseFloat(c.FormValue("share"), 64)
		if err != nil || v <= 0 || v > 100 || math.IsNaN(v) {
			return f, errorf(cbdash.ErrInvalid, "share must be a percent within 1..100")
		}
		f.share = v
	default:
		return f, errorf(cbdash.ErrInvalid, "scope must be all, instance or share")
	}
	if f.forcing() {
		most := int(maxHold / time.Minute)
		ttl, err := strconv.Atoi(c.FormValue("ttl"))
		if err != nil || ttl < 1 || ttl > most {
			return f, errorf(cbdash.ErrInvalid, "ttl: an expiry of 1 to %d minutes (%s, the server's --max-hold) is required to force a breaker", most, holdText(maxHold))
		}
		f.ttlMin = ttl
	}
	return f, nil
}

func (f commandForm) forcing() bool {
	return f.action == protocol.ActionForceOpen || f.action == protocol.ActionForceClosed
}

func (f commandForm) request(actor string) cbdash.CommandRequest {
	r := cbdash.CommandRequest{Service: f.key.Service, Breaker: f.key.Breaker, Action: f.action, Reason: f.reason, Actor: actor}
	switch f.scope {
	case "instance":
		r.Instance = f.instance
	case "share":
		r.Share = f.share
	}
	if f.forcing() {
		r.TTL = time.Duration(f.ttlMin) * time.Minute
	}
	return r
}

// affected estimates how many live instances a command reaches.
func (f commandForm) affected(d cbdash.Dependency) int {
	live := liveCount(d)
	switch f.scope {
	case "instance":
		return 1
	case "share":
		if f.share >= 100 {
			return live
		}
		return max(1, int(math.Ceil(float64(live)*f.share/100)))
	}
	return live
}

// blast says what a command will do, in words.
func blast(f commandForm, d cbdash.Dependency) string {
	n := f.affected(d)
	inst := strconv.Itoa(n) + " instances"
	if n == 1 {
		inst = "1 instance"
	}
	if f.scope == "instance" {
		inst = "instance " + f.instance
	}
	if f.scope == "share" && f.share < 100 {
		inst = "about " + inst + " (" + wording.Pct(f.share) + ")"
	}
	who := inst + " of " + f.key.Service + " to " + f.key.Breaker
	dur := strconv.Itoa(f.ttlMin) + " minutes"
	switch f.action {
	case protocol.ActionForceOpen:
		return "This will reject calls from " + who + " for " + dur + ", then release automatically."
	case protocol.ActionForceClosed:
		return "This will let every call from " + who + " through, even failing ones, for " + dur + ", then release automatically."
	case protocol.ActionRelease:
		return "This will return " + inst + " of " + f.key.Service + " to normal operation of the " + f.key.Breaker + " breaker."
	}
	return "This will reset the " + f.key.Breaker + " breaker on " + inst + " of " + f.key.Service + " to closed, clearing its window."
}

// confirm shows the blast radius of a command before issuing it.
func (s *Server) confirm(c echo.Context) error {
	f, err := parseCommandForm(c, s.maxHold())
	if err != nil {
		return err
	}
	if isDrill(c) {
		return s.operatorDrill(c, f) // drillform.go
	}
	d, err := s.col.Dependency(f.key)
	if err != nil {
		return err
	}
	v := templates.Confirm{
		Page: s.page(c, "Confirm", "overview"), Service: f.key.Service, Breaker: f.key.Breaker,
		Action: f.action, Scope: f.scope, Instance: f.instance, Share: c.FormValue("share"),
		TTL: strconv.Itoa(f.ttlMin), Reason: f.reason, Blast: blast(f, d), Back: backHref(c, f.key, s.now()),
	}
	for _, k := range viewKeys {
		if val := c.FormValue("view_" + k); val != "" {
			v.View = append(v.View, templates.Option{Text: k, Value: val})
		}
	}
	return render(c, http.StatusOK, templates.ConfirmPage(v))
}

// command issues a confirmed command as the logged-in user and shows the
// dependency page, where the result per instance arrives live.
func (s *Server) command(c echo.Context) error {
	f, err := parseCommandForm(c, s.maxHold())
	if err != nil {
		return err
	}
	if _, err := s.col.Issue(c.Request().Context(), actorFrom(c), f.request(actorFrom(c).Name)); err != nil {
		return err
	}
	return redirect(c, backHref(c, f.key, s.now())+"#commands-title")
}

// viewKeys are the range parameters of the dependency page that its
// operator form carries (as view_range, view_end, view_from, view_to).
var viewKeys = []string{"range", "end", "from", "to"}

// backHref is the dependency page on the range the form came from; a
// range that does not parse is dropped (the page's default).
func backHref(c echo.Context, k cbdash.DependencyKey, now time.Time) string {
	q := url.Values{}
	for _, key := range viewKeys {
		if v := c.FormValue("view_" + key); v != "" {
			q.Set(key, v)
		}
	}
	href := depHref(k)
	if len(q) == 0 {
		return href
	}
	if _, err := parseSpan(q, "1h", now); err != nil {
		return href
	}
	return href + "&" + q.Encode()
}

func (s *Server) depCommands(ctx context.Context, k cbdash.DependencyKey) ([]templates.CommandView, error) {
	cmds, err := s.history.Commands(ctx, cbdash.CommandQuery{Service: k.Service, Breaker: k.Breaker, Limit: 10})
	if err != nil {
		return nil, err
	}
	return commandViews(cmds, s.now()), nil
}

// commandViews renders cmds (newest first). A hold (force open or
// closed) that a later command in cmds on the same breaker and scope
// ended before it expired says so: "19:16 — released 19:07 by otto".
func commandViews(cmds []cbdash.Command, now time.Time) []templates.CommandView {
	out := make([]templates.CommandView, len(cmds))
	for i, cmd := range cmds {
		out[i] = commandView(cmd, now)
		if !holds(cmd) {
			continue
		}
		if end, ok := endOf(cmd, cmds[:i]); ok {
			out[i].Expires, out[i].UntilISO = holdEnd(cmd, end), ""
		} else if !cmd.ExpiresAt.IsZero() && !cmd.ExpiresAt.After(now) {
			out[i].Expires, out[i].UntilISO = stamp(cmd.ExpiresAt)+" — expired", ""
		}
	}
	return out
}

// holds reports whether cmd puts a breaker in a forced state.
func holds(cmd cbdash.Command) bool {
	return cmd.Action == protocol.ActionForceOpen || cmd.Action == protocol.ActionForceClosed
}

// endOf finds, among later commands (newer, newest first), the first one
// issued after hold on the same breaker that covers hold's scope: a
// release, a reset or another hold, issued before hold expired.
func endOf(hold cbdash.Command, later []cbdash.Command) (cbdash.Command, bool) {
	for i := len(later) - 1; i >= 0; i-- {
		c := later[i]
		if c.Action == protocol.ActionDeferProbes { // the probe rotation's: ends no hold
			continue
		}
		if c.Service != hold.Service || c.Breaker != hold.Breaker || c.IssuedAt.Before(hold.IssuedAt) {
			continue
		}
		if !hold.ExpiresAt.IsZero() && !c.IssuedAt.Before(hold.ExpiresAt) {
			continue
		}
		all := c.Instance == "" && (c.Share <= 0 || c.Share >= 100)
		if all || (hold.Instance != "" && c.Instance == hold.Instance) {
			return c, true
		}
	}
	return cbdash.Command{}, false
}

// holdEnd is the "until" of a hold that end ended early.
func holdEnd(hold, end cbdash.Command) string {
	verb := "released"
	switch end.Action {
	case protocol.ActionReset:
		verb = "reset"
	case protocol.ActionForceOpen, protocol.ActionForceClosed:
		verb = "replaced by " + incident.ActionText(end.Action)
	}
	until := "no expiry"
	if !hold.ExpiresAt.IsZero() {
		until = stamp(hold.ExpiresAt)
	}
	at := stamp(end.IssuedAt)
	if y, m, d := end.IssuedAt.UTC().Date(); !hold.ExpiresAt.IsZero() {
		if y2, m2, d2 := hold.ExpiresAt.UTC().Date(); y == y2 && m == m2 && d == d2 {
			at = timeOfDay(end.IssuedAt)
		}
	}
	return until + " — " + verb + " " + at + " by " + end.Actor
}

func commandView(cmd cbdash.Command, now time.Time) templates.CommandView {
	k := cbdash.DependencyKey{Service: cmd.Service, Breaker: cmd.Breaker}
	v := templates.CommandView{
		ID: elementID("c-", cmd.ID), IssuedAt: stamp(cmd.IssuedAt), Actor: cmd.Actor, Action: incident.ActionText(cmd.Action),
		Service: cmd.Service, Breaker: cmd.Breaker, Href: depHref(k), Reason: cmd.Reason,
	}
	if id := holdIDOf(cmd.HoldID, cmd.ID); id != "" {
		v.HoldHref = holdHref(id)
	}
	switch {
	case cmd.Share > 0 && cmd.Share < 100:
		v.Scope = wording.Pct(cmd.Share) + " of instances"
	default:
		v.Scope = incident.ScopeText(cmd)
	}
	if cmd.Action == protocol.ActionDeferProbes && cmd.TTL > 0 { // until when the probes are deferred
		v.Expires = stamp(cmd.IssuedAt.Add(cmd.TTL))
	}
	// ExpiresAt ends a forced state; for release and reset it is only a
	// delivery deadline, not worth an "until".
	if !cmd.ExpiresAt.IsZero() && (cmd.Action == protocol.ActionForceOpen || cmd.Action == protocol.ActionForceClosed) {
		v.Expires = stamp(cmd.ExpiresAt)
		if cmd.ExpiresAt.After(now) { // the page counts it down
			v.UntilISO, v.In = isoTime(cmd.ExpiresAt), exactDuration(cmd.ExpiresAt.Sub(now).Truncate(time.Second))
		}
	}
	counts := map[string]int{}
	for _, t := range cmd.Targets {
		counts[t.Status]++
		v.Targets = append(v.Targets, templates.TargetRow{Instance: t.Instance, Status: t.Status, State: stateText(t.State), Error: t.Error, At: timeOfDay(t.At)})
	}
	var parts []string
	for _, st := range []string{cbdash.TargetApplied, cbdash.TargetPending, cbdash.TargetFailed, cbdash.TargetExpired} {
		if counts[st] > 0 {
			parts = append(parts, strconv.Itoa(counts[st])+" "+st)
		}
	}
	v.Summary = strings.Join(parts, ", ")
	if len(cmd.Targets) == 0 {
		v.Summary = "no live instance was reached"
	}
	return v
}

func stateText(s string) string {
	if s == "" {
		return ""
	}
	return stateView(s).Text
}

// audit lists every command, newest first, optionally of one service.
func (s *Server) audit(c echo.Context) error {
	svc := c.QueryParam("service")
	cmds, err := s.history.Commands(c.Request().Context(), cbdash.CommandQuery{Service: svc})
	if err != nil {
		return err
	}
	p := s.page(c, "Audit log", "audit")
	p.LiveURL = "/live?" + url.Values{"view": {"audit"}, "service": {svc}}.Encode()
	return render(c, http.StatusOK, templates.AuditPage(templates.Audit{Page: p, Service: svc, Commands: commandViews(cmds, s.now())}))
}
