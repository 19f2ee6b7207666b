package incident

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Reader is what Build reads from the store. *store.Store implements it.
type Reader interface {
	History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error)
	Transitions(ctx context.Context, q cbdash.TransitionQuery) ([]cbdash.TransitionRecord, error)
	Commands(ctx context.Context, q cbdash.CommandQuery) ([]cbdash.Command, error)
	ConfigChanges(ctx context.Context, k cbdash.DependencyKey, from, to time.Time) ([]cbdash.ConfigChange, error)
}

// Lead-in and tail shown around an incident, and how far back Build looks
// for the start of the failures that led to the first trip.
const (
	LeadIn     = 2 * time.Minute
	Tail       = time.Minute
	LookBack   = 10 * time.Minute
	maxEntries = 10000
)

// Summary is the head of an incident report.
type Summary struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"` // zero while open
	Open  bool      `json:"open"`
	// DegradedSince is the start of the unbroken run of seconds with
	// failed or slow calls that led to the first trip (zero when the
	// history holds none); TimeToFirstOpen is Start minus it.
	DegradedSince   time.Time     `json:"degraded_since,omitzero"`
	TimeToFirstOpen time.Duration `json:"time_to_first_open"` // nanoseconds in JSON (deprecated since API 1.2.0)
	Duration        time.Duration `json:"duration"`           // until End, or until now while open; nanoseconds in JSON (deprecated since API 1.2.0)
	// TimeToFirstOpenMillis and DurationMillis are the same in
	// milliseconds, the API's unit for durations (API 1.2.0).
	TimeToFirstOpenMillis int64    `json:"time_to_first_open_ms"`
	DurationMillis        int64    `json:"duration_ms"`
	Instances             []string `json:"instances"`
	Opens                 int      `json:"opens"`
	// Over [Start, End]: calls rejected for any reason; fallback calls
	// (every run of a fallback, for a rejected or a failed call), those
	// that served an answer and those that failed: FallbackCalls =
	// FallbackSuccesses + FallbacksFailed. "Served" means a fallback
	// that answered everywhere else (a dependency's fallback.served);
	// FallbacksServed, named before that, is FallbackCalls (deprecated
	// since API 1.2.0: read fallback_calls).
	CallsRejected     int64          `json:"calls_rejected"`
	FallbackCalls     int64          `json:"fallback_calls"`
	FallbackSuccesses int64          `json:"fallback_successes"`
	FallbacksServed   int64          `json:"fallbacks_served"`
	FallbacksFailed   int64          `json:"fallbacks_failed"`
	FirstInstance     string         `json:"first_instance"`
	FirstCause        protocol.Cause `json:"first_cause"`
	// Cause is FirstCause in words.
	Cause string `json:"cause"`
}

// Span is a stretch of time an instance spent in one state.
type Span struct {
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	State string    `json:"state"`
}

// Lane is one instance's states across the report's window.
type Lane struct {
	Instance string `json:"instance"`
	Spans    []Span `json:"spans"`
}

// Entry kinds of a timeline.
const (
	EntryTransition = "transition"
	EntryCommand    = "command"
	EntryNote       = "note"
	EntryConfig     = "config"
)

// Entry is one line of the incident's timeline.
type Entry struct {
	At       time.Time `json:"at"`
	Kind     string    `json:"kind"`
	Instance string    `json:"instance,omitempty"`
	Text     string    `json:"text"`
	// Outside is "before" or "after" for an entry of the lead-in or the
	// tail, outside the incident's own span (another incident's events
	// may be there); "" within it. Notes are always the incident's.
	Outside string `json:"outside,omitempty"`
}

// Where an entry falls outside the incident (Entry.Outside).
const (
	OutsideBefore = "before"
	OutsideAfter  = "after"
)

// Report is everything known about one incident: the summary, one lane per
// instance, the history of the dependency around it, and the timeline of
// transitions, operator commands and notes.
type Report struct {
	Incident cbdash.Incident `json:"incident"`
	Summary  Summary         `json:"summary"`
	// From and To bound what the report shows: LeadIn before the start to
	// Tail after the end (or now).
	From     time.Time        `json:"from"`
	To       time.Time        `json:"to"`
	Lanes    []Lane           `json:"lanes"`
	Points   []cbdash.Point   `json:"points"`
	Commands []cbdash.Command `json:"commands"`
	// ConfigChanges are breaker configurations changed by hellos.
	ConfigChanges []cbdash.ConfigChange `json:"config_changes"`
	Timeline      []Entry               `json:"timeline"`
}

// Build assembles the report of inc (read with its notes) at time now.
// Errors are the reader's, wrapped.
func Build(ctx context.Context, r Reader, inc cbdash.Incident, now time.Time) (Report, error) {
	rep := Report{Incident: inc, From: inc.Start.Add(-LeadIn)}
	end := inc.End
	if inc.Open || end.IsZero() {
		end = now
	}
	rep.To = end.Add(Tail)
	if rep.To.After(now) {
		rep.To = now
		if end.After(now) {
			rep.To = end
		}
	}
	trs, err := r.Transitions(ctx, cbdash.TransitionQuery{Service: inc.Service, Breaker: inc.Breaker, From: rep.From, To: rep.To, Limit: maxEntries})
	if err != nil {
		return rep, fmt.Errorf("incident %d: transitions: %w", inc.ID, err)
	}
	slices.Reverse(trs) // oldest first
	rep.Points, err = r.History(ctx, cbdash.HistoryQuery{DependencyKey: inc.DependencyKey, From: rep.From, To: rep.To})
	if err != nil {
		return rep, fmt.Errorf("incident %d: history: %w", inc.ID, err)
	}
	cmds, err := r.Commands(ctx, cbdash.CommandQuery{Service: inc.Service, Breaker: inc.Breaker, Limit: 1000})
	if err != nil {
		return rep, fmt.Errorf("incident %d: commands: %w", inc.ID, err)
	}
	for _, c := range cmds {
		if !c.IssuedAt.Before(rep.From) && c.IssuedAt.Before(rep.To) {
			rep.Commands = append(rep.Commands, c)
		}
	}
	slices.SortFunc(rep.Commands, func(a, b cbdash.Command) int { return a.IssuedAt.Compare(b.IssuedAt) })
	rep.ConfigChanges, err = r.ConfigChanges(ctx, inc.DependencyKey, rep.From, rep.To)
	if err != nil {
		return rep, fmt.Errorf("incident %d: config changes: %w", inc.ID, err)
	}
	before, err := r.History(ctx, cbdash.HistoryQuery{DependencyKey: inc.DependencyKey, From: inc.Start.Add(-LookBack),
		To: inc.Start.Add(time.Second), Resolution: cbdash.ResolutionSecond})
	if err != nil {
		return rep, fmt.Errorf("incident %d: history before: %w", inc.ID, err)
	}
	rep.Summary = summarize(inc, end, rep.Points, before)
	rep.Lanes = lanes(inc, trs, rep.From, rep.To)
	rep.Timeline = timeline(trs, rep.Commands, rep.ConfigChanges, inc.Notes)
	for i := range rep.Timeline {
		e := &rep.Timeline[i]
		switch {
		case e.Kind == EntryNote:
		case e.At.Before(inc.Start):
			e.Outside = OutsideBefore
		case !inc.Open && e.At.After(end):
			e.Outside = OutsideAfter
		}
	}
	return rep, nil
}

// Own is the report limited to the incident's own span, from its start
// to its end (or the report's To while open): the timeline without the
// lead-in and tail, the commands, configuration changes and history
// points within the span, the lanes clipped to it. Exports use it, so
// that a postmortem never carries another incident's events.
func (r Report) Own() Report {
	end := r.To
	if !r.Incident.Open && !r.Incident.End.IsZero() {
		end = r.Incident.End
	}
	start := r.Incident.Start
	in := func(t time.Time) bool { return !t.Before(start) && !t.After(end) }
	out := r
	out.From, out.To = start, end
	out.Timeline = nil
	for _, e := range r.Timeline {
		if e.Outside == "" {
			out.Timeline = append(out.Timeline, e)
		}
	}
	out.Commands = nil
	for _, c := range r.Commands {
		if in(c.IssuedAt) {
			out.Commands = append(out.Commands, c)
		}
	}
	out.ConfigChanges = nil
	for _, cc := range r.ConfigChanges {
		if in(cc.At) {
			out.ConfigChanges = append(out.ConfigChanges, cc)
		}
	}
	out.Points = nil
	for _, p := range r.Points {
		if !p.At.Before(start.Truncate(time.Second)) && !p.At.After(end) {
			out.Points = append(out.Points, p)
		}
	}
	out.Lanes = nil
	for _, l := range r.Lanes {
		ol := Lane{Instance: l.Instance}
		for _, sp := range l.Spans {
			if sp.To.Before(start) || sp.From.After(end) {
				continue
			}
			sp.From, sp.To = later(sp.From, start), earlier(sp.To, end)
			ol.Spans = append(ol.Spans, sp)
		}
		out.Lanes = append(out.Lanes, ol)
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func summarize(inc cbdash.Incident, end time.Time, points, before []cbdash.Point) Summary {
	s := Summary{Start: inc.Start, Open: inc.Open, Duration: end.Sub(inc.Start), Instances: inc.Instances, Opens: inc.Opens,
		FirstInstance: inc.FirstInstance, FirstCause: inc.FirstCause, Cause: CauseText(inc.FirstCause)}
	if !inc.Open {
		s.End = inc.End
	}
	for _, p := range points {
		if p.At.Add(p.Width).Before(inc.Start) || p.At.After(end) {
			continue
		}
		s.CallsRejected += p.Counts.Rejected()
		s.FallbackSuccesses += p.Counts.FallbackSuccess
		s.FallbacksFailed += p.Counts.FallbackFailure
	}
	s.FallbackCalls = s.FallbackSuccesses + s.FallbacksFailed
	s.FallbacksServed = s.FallbackCalls // the deprecated name's meaning, kept
	// Walk back from the second of the first trip while seconds are bad.
	slices.SortFunc(before, func(a, b cbdash.Point) int { return a.At.Compare(b.At) })
	next := time.Time{}
	for i := len(before) - 1; i >= 0; i-- {
		p := before[i]
		if p.At.After(inc.Start) {
			continue
		}
		if !next.IsZero() && p.At.Add(p.Width).Before(next) {
			break // a gap: no report is no evidence of failure
		}
		if p.Counts.Failures == 0 && p.Counts.Slow == 0 {
			break
		}
		s.DegradedSince = p.At
		next = p.At
	}
	if !s.DegradedSince.IsZero() {
		s.TimeToFirstOpen = inc.Start.Sub(s.DegradedSince)
	}
	s.TimeToFirstOpenMillis, s.DurationMillis = s.TimeToFirstOpen.Milliseconds(), s.Duration.Milliseconds()
	return s
}

// lanes builds one lane per instance seen in the transitions or named by
// the incident; an instance's state before its first transition is that
// transition's From (closed when it has none).
func lanes(inc cbdash.Incident, trs []cbdash.TransitionRecord, from, to time.Time) []Lane {
	byInst := map[string][]cbdash.TransitionRecord{}
	for _, tr := range trs {
		byInst[tr.Instance] = append(byInst[tr.Instance], tr)
	}
	for _, inst := range inc.Instances {
		if _, ok := byInst[inst]; !ok {
			byInst[inst] = nil
		}
	}
	var out []Lane
	for inst, list := range byInst {
		state := protocol.StateClosed
		if len(list) > 0 {
			state = list[0].From
		}
		l := Lane{Instance: inst}
		at := from
		for _, tr := range list {
			t := time.UnixMilli(tr.At).UTC()
			if t.After(at) {
				l.Spans = append(l.Spans, Span{From: at, To: t, State: state})
				at = t
			}
			state = tr.To
		}
		if to.After(at) {
			l.Spans = append(l.Spans, Span{From: at, To: to, State: state})
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Lane) int {
		if a.Instance < b.Instance {
			return -1
		}
		if a.Instance > b.Instance {
			return 1
		}
		return 0
	})
	return out
}

func timeline(trs []cbdash.TransitionRecord, cmds []cbdash.Command, ccs []cbdash.ConfigChange, notes []cbdash.IncidentNote) []Entry {
	var out []Entry
	for _, tr := range trs {
		out = append(out, Entry{At: time.UnixMilli(tr.At).UTC(), Kind: EntryTransition, Instance: tr.Instance,
			Text: fmt.Sprintf("%s → %s: %s", StateText(tr.From), StateText(tr.To), CauseText(tr.Cause))})
	}
	for _, c := range cmds {
		out = append(out, Entry{At: c.IssuedAt.UTC(), Kind: EntryCommand, Instance: c.Instance, Text: CommandText(c)})
	}
	for _, cc := range ccs {
		out = append(out, Entry{At: cc.At.UTC(), Kind: EntryConfig, Instance: cc.Instance, Text: "configuration changed: " + ConfigDiff(cc.Previous, cc.Config)})
	}
	for _, n := range notes {
		out = append(out, Entry{At: n.At.UTC(), Kind: EntryNote, Text: fmt.Sprintf("note by %s: %s", orSomeone(n.Author), n.Text)})
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return a.At.Compare(b.At) })
	return out
}

func orSomeone(s string) string {
	if s == "" {
		return "someone"
	}
	return s
}

// StateText is a breaker state in words ("half-open").
func StateText(s string) string {
	switch s {
	case protocol.StateHalfOpen:
		return "half-open"
	case protocol.StateForcedOpen:
		return "forced open"
	case protocol.StateForcedClosed:
		return "forced closed"
	}
	return s
}

// CauseText says why a transition happened, in one line.
func CauseText(c protocol.Cause) string {
	switch c.Kind {
	case protocol.CauseFailureRate:
		return fmt.Sprintf("failure rate %.1f%% reached the threshold %.0f%% (%d of %d calls in the window failed)",
			c.FailureRate, c.Threshold, c.WindowFailed, c.WindowCalls)
	case protocol.CauseSlowCallRate:
		return fmt.Sprintf("slow-call rate %.1f%% reached the threshold %.0f%% (%d of %d calls in the window were slow)",
			c.SlowCallRate, c.Threshold, c.WindowSlow, c.WindowCalls)
	case protocol.CauseOpenElapsed:
		return "the open duration passed; probes let through"
	case protocol.CauseProbeFailed:
		if c.ProbeOutcome != "" {
			return "a probe failed (" + c.ProbeOutcome + ")"
		}
		return "a probe failed"
	case protocol.CauseProbesSucceeded:
		return "probes succeeded"
	case protocol.CauseCommand:
		s := "operator command " + ActionText(c.Action)
		if c.Actor != "" {
			s += " by " + c.Actor
		}
		if c.Reason != "" {
			s += ": " + c.Reason
		}
		return s
	case protocol.CauseAgentCommand:
		return AgentCommandText(c)
	case protocol.CauseQuorum:
		return QuorumText(c)
	case protocol.CauseExpired:
		return "the forced state expired"
	case "":
		return "unknown"
	}
	return c.Kind
}

// QuorumText says, in one line, what a quorum advisory did
// (protocol.CauseQuorum): "quorum advisory open: <the rule and the
// figures>", or "quorum advisory ended: <why>" for its release.
func QuorumText(c protocol.Cause) string {
	s := "quorum advisory open"
	if c.Action == protocol.ActionRelease || c.Action == protocol.ActionReset {
		s = "quorum advisory ended"
	}
	if c.Reason != "" {
		s += ": " + c.Reason
	}
	return s
}

// AgentCommandText says, in one line, that a command was reported by the
// agent and not sent by cbdash (protocol.CauseAgentCommand): whoever the
// agent names is its claim, not an operator of cbdash.
func AgentCommandText(c protocol.Cause) string {
	s := "agent-reported command " + ActionText(c.Action) + ", not sent by cbdash"
	var said []string
	if c.Actor != "" {
		said = append(said, "by "+c.Actor)
	}
	if c.Reason != "" {
		said = append(said, "reason: "+c.Reason)
	}
	if len(said) > 0 {
		s += " (the agent says " + strings.Join(said, "; ") + ")"
	}
	return s
}

// ActionText is an operator action in words ("force open").
func ActionText(a string) string {
	switch a {
	case protocol.ActionForceOpen:
		return "force open"
	case protocol.ActionForceClosed:
		return "force closed"
	case protocol.ActionDeferProbes:
		return "defer probes"
	}
	return a
}

// ScopeText is the instances command c names: one, a share, the
// instances it was sent to (a defer_probes of the probe rotation names
// them), or all.
func ScopeText(c cbdash.Command) string {
	switch {
	case c.Instance != "":
		return "instance " + c.Instance
	case c.Share > 0 && c.Share < 100:
		return fmt.Sprintf("%.0f%% of instances", c.Share)
	case c.Action == protocol.ActionDeferProbes && len(c.Targets) > 0:
		return fmt.Sprintf("%d instances", len(c.Targets))
	}
	return "all instances"
}

// CommandText describes an operator command and its scope in one line.
func CommandText(c cbdash.Command) string {
	s := fmt.Sprintf("%s on %s by %s", ActionText(c.Action), ScopeText(c), orSomeone(c.Actor))
	if c.TTL > 0 {
		s += fmt.Sprintf(" for %s", c.TTL)
	}
	if c.Reason != "" {
		s += ": " + c.Reason
	}
	applied := 0
	for _, t := range c.Targets {
		if t.Status == cbdash.TargetApplied {
			applied++
		}
	}
	if len(c.Targets) > 0 {
		s += fmt.Sprintf(" (applied on %d of %d)", applied, len(c.Targets))
	}
	return s
}
