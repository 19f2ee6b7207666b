package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// inboxLimit bounds the transitions waiting for the report goroutine. It
// drains them within microseconds; the bound only matters if that
// goroutine is starved.
const inboxLimit = 4096

// inbox hands transitions from the breakers' observers (any goroutine) to
// the report goroutine without ever blocking the observer.
type inbox struct {
	limit   int
	mu      sync.Mutex
	queue   []breaker.Transition
	dropped int64
}

func (in *inbox) push(t breaker.Transition) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.queue) >= in.limit {
		in.queue = in.queue[1:]
		in.dropped++
	}
	in.queue = append(in.queue, t)
}

// mentions reports whether a transition of the breaker called name waits
// in the inbox.
func (in *inbox) mentions(name string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.ContainsFunc(in.queue, func(t breaker.Transition) bool { return t.Breaker == name })
}

func (in *inbox) take() ([]breaker.Transition, int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	q, d := in.queue, in.dropped
	in.queue, in.dropped = nil, 0
	return q, d
}

// observe is the agent's transition observer: it runs on whatever
// goroutine made the transition, so it only queues.
func (a *Agent) observe(t breaker.Transition) {
	a.inbox.push(t)
	signal(a.sendReady) // the connection goroutine sends it at once
	signal(a.wake)      // the report goroutine takes it if not connected
}

// reportState is what the report goroutine remembers of a breaker between
// two window reports.
type reportState struct {
	since time.Time // start of the period not reported yet
	// quietAt is the last report tick after since that found nothing
	// to report (zero when there was none): nothing happened in
	// [since, quietAt], so what the next report counts happened after it.
	quietAt  time.Time
	reported bool // a report was sent (the first one is never idle)
	totals   breaker.Totals
	latency  []uint64
	latSum   time.Duration
	state    breaker.State
	inFlight int64
}

// reportLoop is the agent's report goroutine: it owns every reportState,
// reads snapshots on each tick, moves transitions from the inbox to the
// outbox as they come, and applies commands.
func (a *Agent) reportLoop(ctx context.Context) {
	defer a.wg.Done()
	ticks, stop := a.cfg.Clock.NewTicker(a.cfg.ReportInterval)
	defer stop()
	seen := newCommandLog(commandLogSize)
	closing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
			a.retire(a.cfg.Clock.Now())
			a.queue()
		case now := <-ticks:
			if !closing {
				a.report(now, false)
			}
		case c := <-a.cmds:
			if closing {
				a.log.Warn("command refused: the agent is closing", "command_id", c.cmd.ID)
				continue
			}
			a.command(c, seen)
		case done := <-a.final:
			// Snapshots may make lazy transitions (open -> half-open):
			// unsubscribe only after them, and queue what came before.
			now := a.cfg.Clock.Now()
			a.retire(now)
			a.report(now, true)
			a.unsubscribe()
			a.queue()
			closing = true
			close(done)
		}
	}
}

// queue moves the transitions from the inbox to the outbox, followed by
// more (window reports or a command result). Transitions are taken from the
// inbox and added to the outbox in one step, so that their order is kept
// whichever goroutine moves them.
func (a *Agent) queue(more ...item) {
	a.queueMu.Lock()
	defer a.queueMu.Unlock()
	items := append(a.takeTransitions(), more...)
	// Every breaker of these items is declared by the hello generation
	// read now: items are made after their breaker's Register, and a
	// retired breaker stays declared while anything about it is queued.
	// Only a transition that a breaker's observer queued after the agent
	// had forgotten the breaker (a call already under way when
	// Unregister unsubscribed) is not: it is dropped and counted, since
	// the collector would refuse its whole batch.
	var undeclared protocol.Dropped
	a.mu.Lock()
	gen := a.helloGen
	items = slices.DeleteFunc(items, func(it item) bool {
		if name := it.breaker(); name != "" && a.declaredLocked(name) == nil {
			if it.t != nil {
				undeclared.Transitions++
			} else {
				undeclared.Windows++
			}
			return true
		}
		return false
	})
	a.mu.Unlock()
	if !undeclared.IsZero() {
		a.out.countDropped(undeclared)
		a.log.Warn("reports of an unregistered breaker dropped", "transitions", undeclared.Transitions, "windows", undeclared.Windows)
	}
	for i := range items {
		items[i].hello = gen
	}
	if len(items) > 0 {
		a.out.add(items...)
		signal(a.sendReady)
	}
}

// takeTransitions empties the inbox into outbox items.
func (a *Agent) takeTransitions() []item {
	ts, dropped := a.inbox.take()
	if dropped > 0 {
		a.out.countDropped(protocol.Dropped{Transitions: dropped})
		a.log.Warn("transitions dropped: the agent could not keep up", "dropped", dropped)
	}
	items := make([]item, 0, len(ts))
	for _, t := range ts {
		pt := transition(t)
		items = append(items, newItem(&pt, nil, nil))
	}
	return items
}

// report takes a window report of every breaker that had activity, or
// whose idle report is due (or of every breaker with anything to report
// when final), and queues it after the transitions seen so far.
func (a *Agent) report(now time.Time, final bool) {
	var windows []item
	for _, t := range a.registered() {
		for _, w := range a.windows(t, now, final) {
			windows = append(windows, newItem(nil, &w, nil))
		}
	}
	// Snapshots may have made lazy transitions (open -> half-open): they
	// go before the reports that show their result.
	a.queue(windows...)
}

// windows computes t's reports for the period ending now from the deltas
// of its cumulative counters: none when there is nothing to say yet, one
// in general, and two after a quiet stretch (ticks with nothing to
// report): a report of the stretch without counts, then one of the last
// tick's period with what happened in it, so calls are placed in the
// second they were seen, not at the start of the stretch (a collector
// buckets a report at its start).
func (a *Agent) windows(t *tracked, now time.Time, final bool) []protocol.Window {
	s := t.src.Snapshot()
	r := &t.rep
	if now.Before(r.since) { // a late tick
		now = r.since
	}
	counts := countsDelta(s.Totals, r.totals)
	active := counts != (protocol.Counts{}) || s.State != r.state || s.InFlight != r.inFlight || !r.reported
	idleDue := now.Sub(r.since) >= a.cfg.IdleReportInterval
	if !active && (final || !idleDue) {
		if !final && now.After(r.since) {
			r.quietAt = now
		}
		return nil
	}
	var forcedUntil int64
	if !s.ForcedUntil.IsZero() {
		forcedUntil = s.ForcedUntil.UnixMilli()
	}
	var out []protocol.Window
	from := r.since
	if active && r.reported && r.quietAt.After(r.since) && r.quietAt.Before(now) {
		// The quiet stretch, as its idle report would have said it.
		out = append(out, span(t.cfg.Name, r.since, r.quietAt, protocol.Window{
			State: r.state.String(), InFlight: max(r.inFlight, 0), Headroom: headroom(s), ForcedUntil: forcedUntil}))
		from = r.quietAt
	}
	w := protocol.Window{
		State:       s.State.String(),
		Counts:      counts,
		InFlight:    max(s.InFlight, 0),
		Headroom:    headroom(s),
		ForcedUntil: forcedUntil,
	}
	if lat, sum, ended := latencyDelta(s.Latency, r.latency, s.LatencySum-r.latSum); ended {
		w.Latency, w.LatencySumMs = lat, sum
	}
	out = append(out, span(t.cfg.Name, from, now, w))
	*r = reportState{since: now, reported: true, totals: s.Totals, latency: s.Latency,
		latSum: s.LatencySum, state: s.State, inFlight: s.InFlight}
	return out
}

// span sets w's breaker and its period [start, end], cut to the protocol's
// longest window (the most recent part kept) and at least 1 ms long.
func span(name string, start, end time.Time, w protocol.Window) protocol.Window {
	if maxSpan := protocol.MaxWindowMillis * time.Millisecond; end.Sub(start) > maxSpan {
		start = end.Add(-maxSpan)
	}
	w.Breaker = name
	w.Start = start.UnixMilli()
	w.Millis = max(end.UnixMilli()-start.UnixMilli(), 1)
	return w
}

func countsDelta(cur, prev breaker.Totals) protocol.Counts {
	d := func(c, p uint64) int64 { return int64(c - p) }
	return protocol.Counts{
		Admitted:         d(cur.Admitted, prev.Admitted),
		Successes:        d(cur.Successes, prev.Successes),
		Failures:         d(cur.Failures, prev.Failures),
		Errors:           d(cur.Errors, prev.Errors),
		Timeouts:         d(cur.Timeouts, prev.Timeouts),
		Panics:           d(cur.Panics, prev.Panics),
		Slow:             d(cur.Slow, prev.Slow),
		Ignored:          d(cur.Ignored, prev.Ignored),
		RejectedOpen:     d(cur.RejectedOpen, prev.RejectedOpen),
		RejectedHalfOpen: d(cur.RejectedHalfOpenFull, prev.RejectedHalfOpenFull),
		RejectedForced:   d(cur.RejectedForcedOpen, prev.RejectedForcedOpen),
		RejectedBulkhead: d(cur.RejectedBulkhead, prev.RejectedBulkhead),
		RejectedRamp:     d(cur.RejectedRamp, prev.RejectedRamp),
		FallbackSuccess:  d(cur.FallbackSuccesses, prev.FallbackSuccesses),
		FallbackFailure:  d(cur.FallbackFailures, prev.FallbackFailures),
		Misuse:           d(cur.Misuse, prev.Misuse),
	}
}

// latencyDelta returns the histogram delta, in protocol buckets, and the
// latency sum delta in milliseconds; ended is false when no call ended.
func latencyDelta(cur, prev []uint64, sum time.Duration) (delta []int64, sumMs float64, ended bool) {
	if len(cur) != protocol.NumLatencyBuckets {
		return nil, 0, false
	}
	delta = make([]int64, len(cur))
	for i, c := range cur {
		var p uint64
		if i < len(prev) {
			p = prev[i]
		}
		delta[i] = int64(c - p)
		ended = ended || delta[i] != 0
	}
	return delta, float64(sum) / float64(time.Millisecond), ended
}

func headroom(s breaker.Snapshot) protocol.Headroom {
	return protocol.Headroom{
		Calls:                 s.Window.Calls,
		Failures:              s.Window.Failures,
		Slow:                  s.Window.Slow,
		MinimumCalls:          int64(s.MinimumCalls),
		FailureRate:           clampPercent(s.Window.FailureRate),
		FailureRateThreshold:  clampPercent(s.FailureRateThreshold),
		SlowCallRate:          clampPercent(s.Window.SlowCallRate),
		SlowCallRateThreshold: clampPercent(s.SlowCallRateThreshold),
	}
}

func clampPercent(v float64) float64 {
	if !(v >= 0) { // also NaN
		return 0
	}
	return min(v, 100)
}

// transition converts a breaker transition to its wire form.
func transition(t breaker.Transition) protocol.Transition {
	c := t.Cause
	pt := protocol.Transition{
		Breaker: t.Breaker, From: t.From.String(), To: t.To.String(),
		At: t.At.UnixMilli(), Generation: t.Generation,
		Cause: protocol.Cause{
			Kind:         string(c.Kind),
			FailureRate:  clampPercent(c.FailureRate),
			SlowCallRate: clampPercent(c.SlowCallRate),
			Threshold:    c.Threshold,
			WindowCalls:  c.Window.Calls,
			WindowFailed: c.Window.Failures,
			WindowSlow:   c.Window.Slow,
			ProbeOutcome: c.ProbeOutcome,
		},
		OpenMillis: t.OpenDuration.Milliseconds(),
		Shadow:     t.Shadow,
	}
	if pt.Cause.Kind == "" {
		pt.Cause.Kind = "unknown"
	}
	if cmd := c.Command; cmd != nil {
		pt.Cause.CommandID, pt.Cause.Action = cmd.ID, string(cmd.Action)
		pt.Cause.Reason, pt.Cause.Actor = cmd.Reason, cmd.Actor
	}
	if !c.ExpiresAt.IsZero() {
		pt.Cause.ExpiresAt = c.ExpiresAt.UnixMilli()
	}
	return pt
}

// breakerConfig converts a breaker's configuration to its wire form.
func breakerConfig(name string, c breaker.Config) protocol.BreakerConfig {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	bc := protocol.BreakerConfig{
		Name:                     name,
		WindowKind:               c.Window.Kind.String(),
		FailureRateThreshold:     clampPercent(c.FailureRateThreshold),
		SlowCallDurationMillis:   ms(c.SlowCallDuration),
		SlowCallRateThreshold:    clampPercent(c.SlowCallRateThreshold),
		MinimumCalls:             c.MinimumCalls,
		OpenDurationMillis:       ms(c.OpenDuration),
		OpenBackoffMultiplier:    c.OpenBackoff.Multiplier,
		OpenBackoffMaxMillis:     ms(c.OpenBackoff.Max),
		HalfOpenMaxCalls:         c.HalfOpenMaxCalls,
		HalfOpenSuccessThreshold: c.HalfOpenSuccessThreshold,
		CallTimeoutMillis:        ms(c.CallTimeout),
		MaxConcurrent:            c.MaxConcurrent,
		RampMillis:               ms(c.RampDuration),
	}
	if c.Window.Kind == breaker.TimeWindow {
		bc.WindowMillis, bc.WindowBuckets = ms(c.Window.Duration), c.Window.Buckets
	} else {
		bc.WindowSize = c.Window.Size
	}
	if len(c.Shadows) > 0 {
		l := make([]protocol.BreakerConfig, len(c.Shadows))
		for i, s := range c.Shadows {
			l[i] = breakerConfig(s.Name, s.Config)
		}
		bc.Shadows = protocol.NewShadows(l)
	}
	return bc
}
