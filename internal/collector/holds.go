package collector

import (
	"context"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/holds"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Holds, drill statistics and drill reports are package holds'; the
// collector wires a holds.Manager to its live state (the instances a hold
// covers, their sessions to deliver to), its store, its hub and its
// cluster fan-out, and calls it at every hello, ingest, stored batch and
// sweep. The methods below delegate to it.

// holdManager is the collector's holds.Manager, with the calls the
// collector makes in its own terms.
type holdManager struct{ *holds.Manager }

func newHoldManager(c *Collector) holdManager {
	return holdManager{holds.New(holds.Config{Instances: holdFleet{c.live}, Elsewhere: holdsElsewhere{c}, Store: c.store, Events: hubEvents{c.hub},
		Cluster: holdCluster{c}, Now: c.now, Log: c.log, MaxHold: c.cfg.MaxHold, CommandDelivery: c.cfg.CommandDelivery,
		DefaultStops: c.cfg.DefaultStops, Collector: c.cfg.Cluster.NodeID()})}
}

func holdKey(k instKey) holds.Key { return holds.Key{Service: k.service, Instance: k.instance} }

func (m holdManager) hello(ctx context.Context, k instKey)    { m.Hello(ctx, holdKey(k)) }
func (m holdManager) pull(ctx context.Context, k instKey)     { m.Pull(ctx, holdKey(k)) }
func (m holdManager) observe(k instKey, ws []protocol.Window) { m.Observe(holdKey(k), ws) }
func (m holdManager) sweep(ctx context.Context)               { m.Sweep(ctx) }
func (m holdManager) restore(ctx context.Context) error       { return m.Restore(ctx) }
func (m holdManager) flushStats(ctx context.Context)          { m.FlushStats(ctx) }
func (m holdManager) holdCounts(id string) []cbdash.HoldCounts {
	return m.Counts(id)
}
func (m holdManager) adopt(ctx context.Context, hs []cbdash.HoldRecord) { m.Adopt(ctx, hs) }

// holdFleet is live state as the instances holds cover.
type holdFleet struct{ l liveState }

func (f holdFleet) HoldInstances() []holds.Instance {
	infos := f.l.Instances()
	out := make([]holds.Instance, len(infos))
	for i := range infos {
		out[i] = holdInstanceOf(&infos[i])
	}
	return out
}

func (f holdFleet) HoldInstance(k holds.Key) (holds.Instance, bool) {
	info, ok := f.l.Instance(live.Key{Service: k.Service, Instance: k.Instance})
	if !ok {
		return holds.Instance{}, false
	}
	return holdInstanceOf(&info), true
}

// holdsElsewhere is what the collector knows of the instances other
// collectors serve, as holds count them (holds.Elsewhere): their stored
// lines (LinesElsewhere) and their collectors' summaries.
type holdsElsewhere struct{ c *Collector }

func (e holdsElsewhere) InstancesElsewhere(ctx context.Context) ([]holds.Instance, error) {
	lines, err := e.c.LinesElsewhere(ctx)
	if err != nil {
		return nil, err
	}
	var out []holds.Instance
	for i := range lines { // sorted by service, instance, breaker
		l := &lines[i]
		if n := len(out); n == 0 || out[n-1].Ref.Service != l.Service || out[n-1].Ref.Instance != l.Instance {
			out = append(out, holds.Instance{Ref: cbdash.InstanceRef{Service: l.Service, Instance: l.Instance, Labels: l.Labels},
				Stale: l.Stale, Elsewhere: true})
		}
		inst := &out[len(out)-1]
		inst.Breakers = append(inst.Breakers, l.Breaker)
		if why, no := cbdash.HoldsUnsupported(*l.Config); no {
			if inst.Unsupported == nil {
				inst.Unsupported = map[string]string{}
			}
			inst.Unsupported[l.Breaker] = why
		}
	}
	return out, nil
}

func (e holdsElsewhere) PartsElsewhere() []holds.Part {
	ps := e.c.live.Parts()
	out := make([]holds.Part, 0, len(ps))
	for i := range ps {
		s := &ps[i].Summary
		out = append(out, holds.Part{DependencyKey: s.DependencyKey, Instances: s.Instances - s.Stale, Labels: s.Labels,
			Last: s.Last, Rate: s.Rate})
	}
	return out
}

func holdInstanceOf(info *live.InstanceInfo) holds.Instance {
	hi := holds.Instance{Ref: info.Ref, StartedAt: info.StartedAt, Breakers: info.Breakers, Rates: info.Rates, Last: info.Last,
		Unsupported: info.Unsupported, Stale: info.Stale, Pull: info.Pull}
	if info.Conn != nil {
		hi.Conn = holdConn{info.Conn}
	}
	return hi
}

// holdConn delivers a hold's command on an instance's connection
// (holds.Conn).
type holdConn struct{ c live.Conn }

func (h holdConn) Deliver(cmd cbdash.Command, now time.Time) { h.c.Send(wireCommand(cmd, now)) }

// hubEvents publishes hold commands to live subscribers.
type hubEvents struct{ h publisher }

func (e hubEvents) Publish(ev cbdash.Event) { e.h.publish(ev) }

// holdCluster tells the other collectors of the cluster a hold changed.
type holdCluster struct{ c *Collector }

func (hc holdCluster) HoldChanged(ctx context.Context, id string) { hc.c.fleet.holdChanged(ctx, id) }

// DefaultStops is the stop conditions every hold gets unless it drops
// them (Config.DefaultStops).
func (c *Collector) DefaultStops() []cbdash.StopCondition { return c.cfg.DefaultStops }

// MaxHold is the longest hold the collector accepts (Config.MaxHold).
func (c *Collector) MaxHold() time.Duration { return c.cfg.MaxHold }

// createHold is CreateHold once the actor is in req.Actor: see
// holds.Manager.Create.
func (c *Collector) createHold(ctx context.Context, req cbdash.HoldRequest) (cbdash.HoldRecord, error) {
	return c.holds.Create(ctx, req)
}

// releaseHold is ReleaseHold with the actor's name: see
// holds.Manager.Release.
func (c *Collector) releaseHold(ctx context.Context, id, actor, reason string) (cbdash.HoldRecord, error) {
	return c.holds.Release(ctx, id, actor, reason)
}

// Holds returns the holds live at the collector's now (live true) or
// every hold, newest first, with their coverage; limit 0 = 200. Errors:
// the store's.
func (c *Collector) Holds(ctx context.Context, live bool, limit int) ([]cbdash.HoldRecord, error) {
	return c.holds.Holds(ctx, live, limit)
}

// Hold returns one hold with its coverage. Errors: cbdash.ErrNotFound or
// the store's error.
func (c *Collector) Hold(ctx context.Context, id string) (cbdash.HoldRecord, error) {
	return c.holds.Hold(ctx, id)
}

// PlanHold returns the blast radius of req without acting: see
// holds.Manager.Plan. Errors: cbdash.ErrInvalid as CreateHold, or the
// store's.
func (c *Collector) PlanHold(ctx context.Context, req cbdash.HoldRequest) (cbdash.HoldPlan, error) {
	return c.holds.Plan(ctx, req)
}

// holdsCovering returns the live holds whose selector covers k, newest
// first.
func (c *Collector) holdsCovering(k cbdash.DependencyKey) []cbdash.HoldRecord {
	return c.holds.Covering(k)
}

// HoldsCovering returns the live holds that cover breakers of dependency
// k, the governing one first where several match the same breakers (the
// most recently created wins).
func (c *Collector) HoldsCovering(k cbdash.DependencyKey) []cbdash.HoldRecord {
	return c.holds.Covering(k)
}

// HoldReport builds the drill report of hold id: see
// holds.Manager.Report. Errors: cbdash.ErrNotFound, or the store's error.
func (c *Collector) HoldReport(ctx context.Context, id string) (cbdash.HoldReport, error) {
	return c.holds.Report(ctx, id)
}

// HoldReportMarkdown renders a drill report as Markdown
// (holds.ReportMarkdown).
func HoldReportMarkdown(r cbdash.HoldReport) []byte { return holds.ReportMarkdown(r) }

// refuseUnsupportedTargets refuses a command (release, reset) for breaker
// k of the named instances when none of them can apply it.
func (c *Collector) refuseUnsupportedTargets(ctx context.Context, k cbdash.DependencyKey, instances []string) error {
	return c.holds.RefuseUnsupportedTargets(ctx, k, instances)
}

// HoldAnswerText is a covered breaker's answer to a hold in words
// (holds.AnswerText).
func HoldAnswerText(in cbdash.HoldInstanceReport, ongoing bool) string {
	return holds.AnswerText(in, ongoing)
}

// HoldCallersCounted says which seconds a drill report's callers'
// figures count, briefly (holds.CallersCounted).
func HoldCallersCounted(r cbdash.HoldReport) string { return holds.CallersCounted(r) }
