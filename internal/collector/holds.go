package collector

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Holds are desired state: the collector keeps every live hold in memory
// (restored from the store at start) and applies, to every instance
// breaker, the hold that governs it (cbdash.Governing: the most recently
// created live hold whose selector matches). It does so when a hold is
// created or released, when a hold expires (an older hold may govern
// again), and at every hello of an instance: its first connection, a
// reconnection, and a restart under a new id or the same one.
//
// A hold is sent per service as one command (id "<hold>-<service hash>",
// recorded in the audit log with the hold's id) whose targets are the
// instances it reached, so the breakers' answers land where every command's
// do. An agent applies a command id once per process; a process that
// reconnects is sent the same id again (it answers with its first result),
// a new process applies it afresh. When a process falls back to an older
// hold after a newer one ended, the older hold is sent under a new id.
//
// The agent enforces the expiry it was given (ttl) on its own, so a hold
// ends on time even when the collector is unreachable; a released hold is
// sent as a release command, also per service.

// holdManager owns the live holds and what was applied where.
type holdManager struct {
	c *Collector

	// mu serialises applying holds: a hello and a hold created at the
	// same moment never both decide for one instance. Held while writing
	// to the store and queueing to sessions; it may take live.mu, never
	// the reverse.
	mu      sync.Mutex
	holds   map[string]cbdash.HoldRecord       // not yet expired (released ones too, until they would have)
	applied map[instKey]map[string]appliedHold // by instance, then breaker
	cmds    map[string]bool                    // command ids known to be in the store
	seq     atomic.Uint64                      // the sequence in hold ids (newHoldID)

	// statsMu guards cover and stats; it takes nothing else.
	statsMu sync.Mutex
	cover   map[coverKey][]coverSpan
	stats   map[statKey]*cbdash.HoldCounts
	dirty   map[string]bool // hold ids with unsaved stats
}

// appliedHold is the hold last sent to one breaker of one agent process.
type appliedHold struct {
	holdID    string
	created   time.Time // the hold's CreatedAt
	cmdID     string
	startedAt int64
}

type coverKey struct {
	k       instKey
	breaker string
}

// coverSpan is a stretch of time a hold covered a breaker: window reports
// that end after from and start before to are counted for it.
type coverSpan struct {
	holdID   string
	from, to int64 // Unix ms; to = the hold's end
}

type statKey struct {
	holdID  string
	k       instKey
	breaker string
}

func newHoldManager(c *Collector) *holdManager {
	return &holdManager{c: c, holds: make(map[string]cbdash.HoldRecord), applied: make(map[instKey]map[string]appliedHold),
		cmds: make(map[string]bool), cover: make(map[coverKey][]coverSpan), stats: make(map[statKey]*cbdash.HoldCounts),
		dirty: make(map[string]bool)}
}

// holdInst is what applying holds needs of one instance.
type holdInst struct {
	ref       cbdash.InstanceRef
	startedAt int64
	breakers  []string
	rates     map[string]float64 // calls per second of each breaker's last report
	// unsupported says why a breaker cannot be held (its hello set
	// holds_unsupported); such a breaker is never sent a hold.
	unsupported map[string]string
	sess        *session
	stale       bool
	// pull is set for an instance that reports over HTTP ingest (no
	// session), at its ingest: what is sent to it is recorded as
	// pending targets, which the ingest response carries.
	pull bool
}

// reachable reports whether commands can be delivered to hi now.
func (hi holdInst) reachable() bool { return hi.sess != nil || hi.pull }

// MaxHold is the longest hold the collector accepts (Config.MaxHold).
func (c *Collector) MaxHold() time.Duration { return c.cfg.MaxHold }

// createHold is CreateHold once the actor is in req.Actor. It stores a hold and applies it to every connected instance it
// covers, now and at every later hello (an instance on HTTP ingest: at
// its next ingest), until it expires or is released. Breakers that cannot
// be held (holds_unsupported) are never sent it. The actor is req.Actor.
// It returns the hold with its coverage so far (answers arrive later: see
// Hold).
//
// Errors: cbdash.ErrInvalid naming the bad field (a ttl over
// Config.MaxHold names the limit; a selector whose live breakers all
// cannot be held gives their reason), or the store's error (then nothing
// was sent).
func (c *Collector) createHold(ctx context.Context, req cbdash.HoldRequest) (cbdash.HoldRecord, error) {
	if err := req.Validate(c.cfg.MaxHold); err != nil {
		return cbdash.HoldRecord{}, err
	}
	if err := c.refuseUnsupported(req.Selector); err != nil {
		return cbdash.HoldRecord{}, err
	}
	now := c.now().UTC()
	h := cbdash.HoldRecord{ID: c.holds.newHoldID(now), HoldRequest: req, CreatedAt: now, Until: now.Add(req.TTL)}
	if err := c.store.CreateHold(ctx, h); err != nil {
		return cbdash.HoldRecord{}, fmt.Errorf("record hold: %w", err)
	}
	m := c.holds
	m.mu.Lock()
	m.holds[h.ID] = h
	for _, hi := range c.live.holdInstances() {
		if !hi.reachable() || !coversAny(h.Selector, hi) { // an offline one gets it at its hello
			continue
		}
		m.reconcileLocked(ctx, hi, false)
	}
	m.mu.Unlock()
	c.fleet.holdChanged(ctx, h.ID)
	return c.store.Hold(ctx, h.ID)
}

func coversAny(sel cbdash.Selector, hi holdInst) bool {
	for _, b := range hi.breakers {
		if _, no := hi.unsupported[b]; !no && sel.Matches(hi.ref, b) {
			return true
		}
	}
	return false
}

// releaseHold is ReleaseHold with the actor's name. It ends hold id before its expiry: every instance breaker it
// governed returns to its automatic state (closed, with an empty window)
// unless an older live hold covers it, which is then applied again. actor
// and reason go into the audit log; reason is required.
//
// Errors: cbdash.ErrInvalid for a missing reason, cbdash.ErrNotFound for
// an unknown hold, cbdash.ErrConflict for a hold already released or
// expired, or the store's error.
func (c *Collector) releaseHold(ctx context.Context, id, actor, reason string) (cbdash.HoldRecord, error) {
	if strings.TrimSpace(reason) == "" {
		return cbdash.HoldRecord{}, fmt.Errorf("%w: reason is required: it goes into the audit log", cbdash.ErrInvalid)
	}
	if len(reason) > 1000 {
		return cbdash.HoldRecord{}, fmt.Errorf("%w: reason is longer than 1000 bytes", cbdash.ErrInvalid)
	}
	if err := cbdash.CheckText("reason", reason, false); err != nil {
		return cbdash.HoldRecord{}, err
	}
	now := c.now().UTC()
	m := c.holds
	m.mu.Lock()
	h, err := c.store.ReleaseHold(ctx, id, now, actor, reason)
	if err != nil {
		m.mu.Unlock()
		return cbdash.HoldRecord{}, err
	}
	h.Coverage = nil
	m.holds[id] = h
	m.endSpans(id, now)
	for k, bs := range m.applied {
		for _, a := range bs {
			if a.holdID != id {
				continue
			}
			if hi, ok := c.live.holdInstance(k); ok {
				m.reconcileLocked(ctx, hi, false)
			}
			break
		}
	}
	m.mu.Unlock()
	c.fleet.holdChanged(ctx, id)
	m.flushStats(ctx)
	return c.store.Hold(ctx, id)
}

// Holds returns the holds live at the collector's now (q.LiveAt zero and
// live true) or those of q, newest first, with their coverage.
func (c *Collector) Holds(ctx context.Context, live bool, limit int) ([]cbdash.HoldRecord, error) {
	q := cbdash.HoldQuery{Limit: limit}
	if live {
		q.LiveAt = c.now().UTC()
	}
	return c.store.Holds(ctx, q)
}

// Hold returns one hold with its coverage. Errors: cbdash.ErrNotFound or
// the store's error.
func (c *Collector) Hold(ctx context.Context, id string) (cbdash.HoldRecord, error) {
	return c.store.Hold(ctx, id)
}

// PlanHold returns the blast radius of req without acting: the services
// and live (non-stale) instances it would cover now, their calls per
// second, and the live holds it would supersede. Errors: cbdash.ErrInvalid
// as CreateHold.
func (c *Collector) PlanHold(req cbdash.HoldRequest) (cbdash.HoldPlan, error) {
	if err := req.Validate(c.cfg.MaxHold); err != nil {
		return cbdash.HoldPlan{}, err
	}
	now := c.now()
	p := cbdash.HoldPlan{Selector: req.Selector, Action: req.Action, Services: []string{}, Instances: []string{}}
	services := map[string]bool{}
	superseded := map[string]bool{}
	m := c.holds
	m.mu.Lock()
	others := m.listLocked()
	m.mu.Unlock()
	for _, hi := range c.live.holdInstances() {
		if hi.stale { // connected, on HTTP ingest, or away for less than the stale timeout
			continue
		}
		eligible, matched := false, false
		for _, b := range hi.breakers {
			if !req.Selector.CoversDependency(cbdash.DependencyKey{Service: hi.ref.Service, Breaker: b}) {
				continue
			}
			eligible = true
			if !req.Selector.Matches(hi.ref, b) {
				continue
			}
			if why, no := hi.unsupported[b]; no {
				p.Unsupported = append(p.Unsupported, hi.ref.Service+"/"+hi.ref.Instance+": "+why)
				continue
			}
			matched = true
			p.CallsPerSecond += hi.rates[b]
			if g, ok := cbdash.Governing(others, hi.ref, b, now); ok {
				superseded[g.ID] = true
			}
		}
		if eligible {
			p.Eligible++
		}
		if matched {
			services[hi.ref.Service] = true
			p.Instances = append(p.Instances, hi.ref.Service+"/"+hi.ref.Instance)
		}
	}
	for s := range services {
		p.Services = append(p.Services, s)
	}
	sort.Strings(p.Services)
	for id := range superseded {
		p.Superseded = append(p.Superseded, id)
	}
	sort.Strings(p.Superseded)
	sort.Strings(p.Unsupported)
	return p, nil
}

// holdsCovering returns the live holds whose selector covers k, newest
// first.
func (c *Collector) holdsCovering(k cbdash.DependencyKey) []cbdash.HoldRecord {
	now := c.now()
	m := c.holds
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []cbdash.HoldRecord
	for _, h := range m.listLocked() {
		if h.LiveAt(now) && h.Selector.CoversDependency(k) {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[j].Superseded(out[i]) })
	return out
}

// HoldsCovering returns the live holds that cover breakers of dependency
// k, the governing one first where several match the same breakers (the
// most recently created wins).
func (c *Collector) HoldsCovering(k cbdash.DependencyKey) []cbdash.HoldRecord {
	return c.holdsCovering(k)
}

func (m *holdManager) listLocked() []cbdash.HoldRecord {
	out := make([]cbdash.HoldRecord, 0, len(m.holds))
	for _, h := range m.holds {
		out = append(out, h)
	}
	return out
}

// hello applies the holds governing an instance that just said hello on
// session s.
func (m *holdManager) hello(ctx context.Context, k instKey) {
	hi, ok := m.c.live.holdInstance(k)
	if !ok || hi.sess == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reconcileLocked(ctx, hi, true)
}

// pull applies the holds governing an instance that reports over HTTP
// ingest, at each of its ingests: it has no session, so what it needs is
// recorded as pending targets, which the ingest response then carries
// (and carries again until the instance answers). A hold created or
// released meanwhile reaches it at its next ingest.
func (m *holdManager) pull(ctx context.Context, k instKey) {
	hi, ok := m.c.live.holdInstance(k)
	if !ok || hi.sess != nil {
		return
	}
	hi.pull = true
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reconcileLocked(ctx, hi, true)
}

// reconcileLocked sends hi whatever its breakers need to be governed by
// the right hold: the governing hold when another (or none) was sent to
// this process, the same command again at a hello (a reconnection), a
// release when the hold it had was released and none governs now.
func (m *holdManager) reconcileLocked(ctx context.Context, hi holdInst, atHello bool) {
	c := m.c
	now := c.now().UTC()
	holds := m.listLocked()
	k := instKey{hi.ref.Service, hi.ref.Instance}
	for _, b := range hi.breakers {
		if _, no := hi.unsupported[b]; no {
			continue // refused up front; the agent would refuse it too
		}
		prev, had := m.applied[k][b]
		win, ok := cbdash.Governing(holds, hi.ref, b, now)
		switch {
		case ok && had && prev.holdID == win.ID && prev.startedAt == hi.startedAt:
			if atHello && hi.sess != nil { // a reconnection: the agent answers again, or applies what it missed
				m.send(ctx, hi, b, win, prev.cmdID, now, false)
			}
		case ok:
			cmdID := serviceCommandID(win.ID, hi.ref.Service)
			if had && prev.startedAt == hi.startedAt && prev.holdID != win.ID && win.CreatedAt.Before(prev.created) {
				cmdID = win.ID + "-" + shortID() // this process may have applied it before
			}
			if m.send(ctx, hi, b, win, cmdID, now, atHello) {
				if m.applied[k] == nil {
					m.applied[k] = make(map[string]appliedHold)
				}
				m.applied[k][b] = appliedHold{holdID: win.ID, created: win.CreatedAt, cmdID: cmdID, startedAt: hi.startedAt}
			}
		case had:
			old := m.holds[prev.holdID]
			if !old.ReleasedAt.IsZero() && old.ReleasedAt.Before(old.Until) && hi.reachable() {
				if !m.sendRelease(ctx, hi, b, old, now) {
					continue
				}
			} else if !hi.reachable() {
				continue // released while away: the release is sent at its hello
			}
			delete(m.applied[k], b)
		}
	}
}

// send records and sends hold h to breaker b of hi as command cmdID. It
// reports whether the command was sent (false when the store failed, or
// hi is not reachable).
func (m *holdManager) send(ctx context.Context, hi holdInst, b string, h cbdash.HoldRecord, cmdID string, now time.Time, atHello bool) bool {
	if !hi.reachable() {
		return false
	}
	c := m.c
	cmd := cbdash.Command{ID: cmdID, HoldID: h.ID, IssuedAt: h.CreatedAt, ExpiresAt: h.Until,
		CommandRequest: cbdash.CommandRequest{Service: hi.ref.Service, Breaker: b, Action: h.Action, TTL: h.TTL,
			Reason: h.Reason, Actor: h.Actor, Instance: strings.Join(h.Selector.Instances, ","), Share: h.Selector.Share}}
	if err := m.target(ctx, cmd, hi.ref.Instance); err != nil {
		c.log.Error("record hold target", "hold", h.ID, "instance", hi.ref.Instance, "err", err)
		return false
	}
	late := atHello && now.After(h.CreatedAt)
	if hi.pull { // an ingest is no hello: late when the process started after the hold
		late = hi.startedAt > h.CreatedAt.UnixMilli()
	}
	cov := cbdash.HoldCoverage{Service: hi.ref.Service, Instance: hi.ref.Instance, Breaker: b, StartedAt: hi.startedAt,
		CommandID: cmdID, CoveredAt: now, JoinedLate: late}
	if err := c.store.AddHoldCoverage(ctx, h.ID, cov); err != nil {
		c.log.Error("record hold coverage", "hold", h.ID, "instance", hi.ref.Instance, "err", err)
	}
	m.cover1(coverKey{instKey{hi.ref.Service, hi.ref.Instance}, b}, coverSpan{holdID: h.ID, from: now.UnixMilli(), to: h.End().UnixMilli()})
	if hi.sess != nil { // a pulling instance reads it from its pending commands
		hi.sess.send(wireCommand(cmd, now))
	}
	return true
}

// sendRelease sends breaker b of hi the release of hold h.
func (m *holdManager) sendRelease(ctx context.Context, hi holdInst, b string, h cbdash.HoldRecord, now time.Time) bool {
	cmd := cbdash.Command{ID: h.ID + "-r" + serviceHash(hi.ref.Service), HoldID: h.ID, IssuedAt: h.ReleasedAt,
		ExpiresAt: h.ReleasedAt.Add(m.c.cfg.CommandDelivery),
		CommandRequest: cbdash.CommandRequest{Service: hi.ref.Service, Breaker: b, Action: protocol.ActionRelease,
			Reason: h.ReleaseReason, Actor: h.ReleasedBy}}
	if err := m.target(ctx, cmd, hi.ref.Instance); err != nil {
		m.c.log.Error("record hold release target", "hold", h.ID, "instance", hi.ref.Instance, "err", err)
		return false
	}
	if hi.sess != nil {
		hi.sess.send(wireCommand(cmd, now))
	}
	return true
}

// target records instance as a pending target of cmd, creating cmd in the
// audit log the first time.
func (m *holdManager) target(ctx context.Context, cmd cbdash.Command, instance string) error {
	c := m.c
	t := cbdash.CommandTarget{Instance: instance, Status: cbdash.TargetPending}
	if !m.cmds[cmd.ID] {
		cmd.Targets = []cbdash.CommandTarget{t}
		err := c.store.CreateCommand(ctx, cmd)
		switch {
		case err == nil:
			m.cmds[cmd.ID] = true
			c.hub.publish(cbdash.Event{Kind: cbdash.EventCommand, At: c.now(), Command: &cmd})
			return nil
		case errors.Is(err, cbdash.ErrConflict):
			m.cmds[cmd.ID] = true
		default:
			return err
		}
	}
	if err := c.store.SetCommandTarget(ctx, cmd.ID, t); err != nil {
		return err
	}
	if stored, err := c.store.Command(ctx, cmd.ID); err == nil {
		c.hub.publish(cbdash.Event{Kind: cbdash.EventCommand, At: c.now(), Command: &stored})
	}
	return nil
}

// sweep forgets expired holds and applies, to the breakers they governed,
// whatever governs them now (an older, longer hold; or nothing: the agent
// has ended the forced state itself). It saves the counts of holds.
func (m *holdManager) sweep(ctx context.Context) {
	now := m.c.now()
	m.mu.Lock()
	var ended []string
	for id, h := range m.holds {
		if !now.Before(h.Until) {
			ended = append(ended, id)
			delete(m.holds, id)
		}
	}
	if len(ended) > 0 {
		for k, bs := range m.applied {
			touched := false
			for b, a := range bs {
				if _, live := m.holds[a.holdID]; !live {
					delete(bs, b)
					touched = true
				}
			}
			if touched {
				if hi, ok := m.c.live.holdInstance(k); ok {
					m.reconcileLocked(ctx, hi, false)
				}
			}
		}
	}
	m.mu.Unlock()
	m.flushStats(ctx)
	m.pruneSpans(now)
}

// restore loads the holds that have not expired, what was applied where,
// and what they counted so far.
func (m *holdManager) restore(ctx context.Context) error {
	now := m.c.now()
	hs, err := m.c.store.Holds(ctx, cbdash.HoldQuery{Limit: 5000})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range hs {
		if !now.Before(h.Until) {
			continue
		}
		cov := h.Coverage
		h.Coverage = nil
		m.holds[h.ID] = h
		for _, cv := range cov {
			k := instKey{cv.Service, cv.Instance}
			if m.applied[k] == nil {
				m.applied[k] = make(map[string]appliedHold)
			}
			if prev, ok := m.applied[k][cv.Breaker]; ok && prev.startedAt > cv.StartedAt {
				continue
			} else if ok && prev.startedAt == cv.StartedAt && !m.holds[prev.holdID].Superseded(h) {
				continue
			}
			m.applied[k][cv.Breaker] = appliedHold{holdID: h.ID, created: h.CreatedAt, cmdID: cv.CommandID, startedAt: cv.StartedAt}
			m.cover1(coverKey{k, cv.Breaker}, coverSpan{holdID: h.ID, from: cv.CoveredAt.UnixMilli(), to: h.End().UnixMilli()})
		}
		stats, err := m.c.store.HoldStats(ctx, h.ID)
		if err != nil {
			return err
		}
		m.statsMu.Lock()
		for _, s := range stats {
			s := s
			m.stats[statKey{h.ID, instKey{s.Service, s.Instance}, s.Breaker}] = &s
		}
		m.statsMu.Unlock()
	}
	return nil
}

// newHoldID names a hold created at created: "h", 11 hex digits of its
// Unix ms, 5 of a per-process sequence, so that of two holds created in
// the same millisecond the later has the greater id (the tie-break of
// cbdash.HoldRecord.Superseded: the most recent wins).
func (m *holdManager) newHoldID(created time.Time) string {
	return fmt.Sprintf("h%011x%05x", created.UnixMilli()&(1<<44-1), m.seq.Add(1)&(1<<20-1))
}

func shortID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// serviceCommandID is the command a hold is sent as to one service.
func serviceCommandID(holdID, service string) string { return holdID + "-" + serviceHash(service) }

func serviceHash(service string) string {
	h := fnv.New32a()
	h.Write([]byte(service))
	return fmt.Sprintf("%08x", h.Sum32())
}
