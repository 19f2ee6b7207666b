package alert

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// Defaults of a grouped rule's timers (cbdash.AlertRule GroupWait and
// GroupInterval left at zero). Alertmanager's are 30s and 5m; a breaker
// trip is news sooner than a metric's alert, so cbdash waits less.
const (
	DefaultGroupWait     = 10 * time.Second
	DefaultGroupInterval = time.Minute
)

// grouped reports whether n goes out in a group's message: a firing or a
// resolve of a rule with GroupBy.
func grouped(n Notification) bool {
	return n.Rule.GroupBy != "" && (n.Event == cbdash.AlertFiring || n.Event == cbdash.AlertResolved)
}

// groupKey is the subject of the group n belongs to: "*/payments" (by
// breaker, across services), "checkout/*" (by service); a stale alert
// ("service@instance") has no breaker: "*/(stale)".
func groupKey(n Notification) string {
	svc, br, ok := strings.Cut(n.Subject, "/")
	if !ok {
		svc, _, _ = strings.Cut(n.Subject, "@")
		br = "(stale)"
	}
	if n.Rule.GroupBy == cbdash.GroupService {
		return svc + "/*"
	}
	return "*/" + br
}

// grouper holds one rule's grouped notifications until their group's
// message is due (Alertmanager's group_wait and group_interval). Its
// goroutine is the rule's delivery loop; it is not safe for concurrent
// use.
type grouper struct {
	groups map[string]*group
}

type group struct {
	firing   []Notification // firings waiting for the group's next message
	resolved []Notification // resolves waiting for the group to empty
	// flapping are flapping messages of alerts whose firing waits in
	// firing: each goes out right after the message carrying its firing.
	flapping []Notification
	open     map[string]bool // subjects fired (sent or waiting) and not resolved
	due      time.Time       // when the waiting ones go out; zero: nothing waits
	last     time.Time       // when the group's last firing message went out
}

// batch is one message of a group and the notifications it carries.
type batch struct {
	n       Notification
	members []Notification
}

func newGrouper() *grouper { return &grouper{groups: make(map[string]*group)} }

// add puts n, received at now, in its group: a firing waits GroupWait
// in a new group, else until GroupInterval after the group's last
// message; a resolve waits until every alert of the group resolved. A
// resolve whose firing is still waiting takes it out: neither is sent.
func (g *grouper) add(n Notification, now time.Time) {
	k := groupKey(n)
	gr := g.groups[k]
	if gr == nil {
		gr = &group{open: make(map[string]bool)}
		g.groups[k] = gr
	}
	if n.Event == cbdash.AlertFiring {
		gr.open[n.Subject] = true
		gr.firing = append(gr.firing, n)
		if gr.due.IsZero() {
			gr.due = now.Add(groupWait(n.Rule))
			if !gr.last.IsZero() {
				gr.due = later(now, gr.last.Add(groupInterval(n.Rule)))
			}
		}
		return
	}
	delete(gr.open, n.Subject)
	gr.resolved = append(gr.resolved, n)
	if len(gr.open) == 0 {
		gr.due = now
	}
}

// holdFlapping keeps n, a flapping message of a grouped rule, when its
// alert's firing still waits in its group (the group wait or interval):
// it then goes out after that firing, never before. False: n is to go
// out now.
func (g *grouper) holdFlapping(n Notification) bool {
	if n.Event != cbdash.AlertFlapping || n.Rule.GroupBy == "" {
		return false
	}
	gr := g.groups[groupKey(n)]
	if gr == nil || !slices.ContainsFunc(gr.firing, func(f Notification) bool { return f.Subject == n.Subject }) {
		return false
	}
	gr.flapping = append(gr.flapping, n)
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func groupWait(r cbdash.AlertRule) time.Duration {
	if r.GroupWait > 0 {
		return r.GroupWait
	}
	return DefaultGroupWait
}

func groupInterval(r cbdash.AlertRule) time.Duration {
	if r.GroupInterval > 0 {
		return r.GroupInterval
	}
	return DefaultGroupInterval
}

// next is when the earliest group's message is due.
func (g *grouper) next() (time.Time, bool) {
	var due time.Time
	for _, gr := range g.groups {
		if !gr.due.IsZero() && (due.IsZero() || gr.due.Before(due)) {
			due = gr.due
		}
	}
	return due, !due.IsZero()
}

// flush returns the messages due at now, by group: the firings waiting
// (those resolved meanwhile left out), then, for a group whose every
// alert resolved, one resolve.
func (g *grouper) flush(now time.Time) []batch {
	var out []batch
	for _, k := range slices.Sorted(maps.Keys(g.groups)) {
		gr := g.groups[k]
		if gr.due.IsZero() || gr.due.After(now) {
			continue
		}
		gr.due = time.Time{}
		if b, ok := gr.firingBatch(k, now); ok {
			out = append(out, b)
			gr.last = now
			out = append(out, gr.flappingAfter(b)...)
		}
		gr.flapping = nil // of alerts resolved before their firing went out: neither is sent
		if len(gr.open) == 0 && len(gr.resolved) > 0 {
			out = append(out, groupBatch(k, cbdash.AlertResolved, gr.resolved, now))
			gr.resolved = nil
		}
		if len(gr.open) == 0 && len(gr.firing) == 0 {
			delete(g.groups, k)
		}
	}
	return out
}

// firingBatch is the message of the firings waiting in gr that have not
// resolved meanwhile (their resolves, waiting too, are then sent with
// the group's resolve: a resolve never comes without its alert).
func (gr *group) firingBatch(k string, now time.Time) (batch, bool) {
	var live []Notification
	for _, n := range gr.firing {
		if gr.open[n.Subject] {
			live = append(live, n)
		}
	}
	gr.firing = nil
	if len(live) == 0 {
		return batch{}, false
	}
	return groupBatch(k, cbdash.AlertFiring, live, now), true
}

// flappingAfter returns the flapping messages held for the firings b
// carries, one message each.
func (gr *group) flappingAfter(b batch) []batch {
	var out []batch
	for _, n := range gr.flapping {
		if slices.Contains(b.n.Members, n.Subject) {
			out = append(out, batch{n: n, members: []Notification{n}})
		}
	}
	return out
}

// groupBatch is one message for members, all of event, in group k: its
// subject is k, its start the earliest member's, its detail names every
// member.
func groupBatch(k, event string, members []Notification, now time.Time) batch {
	n := Notification{Rule: members[0].Rule, Subject: k, Event: event, At: now, Since: members[0].Since}
	var lines []string
	for _, m := range members {
		if m.Since.Before(n.Since) {
			n.Since = m.Since
		}
		n.Members = append(n.Members, m.Subject)
		line := m.Detail
		if event == cbdash.AlertResolved {
			line = m.Now
		}
		lines = append(lines, line)
	}
	slices.Sort(n.Members)
	n.Detail = fmt.Sprintf("%d alerts: %s", len(members), strings.Join(lines, "; "))
	if event == cbdash.AlertResolved {
		n.Now = fmt.Sprintf("all %d alerts of %s resolved: %s", len(members), k, strings.Join(lines, "; "))
	}
	return batch{n: n, members: members}
}
