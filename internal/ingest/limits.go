package ingest

import (
	"fmt"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Limits bound what agents can make the collector hold, beyond the
// protocol's per-hello limits (protocol.MaxBreakersPerHello):
// an agent token is deployed on every instance of a service, so whoever
// has one must not be able to fill the server's memory with instances,
// breakers or dependencies, nor take the room every other service needs.
// Hence quotas of each agent token and of each service (instances,
// breakers, dependencies) below the collector's own limit of
// dependencies: the per-token dependency quota is below MaxDependencies
// (validate refuses one that is not), so that no single token can fill
// it. A token limited to one service is in practice held by the service's
// quotas (it can speak for that service only); a token for any service
// ("*", often shared by a fleet) by its token quotas, and each service it
// speaks for by the service quotas, so that one service of a shared
// token cannot take the room of the others.
//
// A hello over a quota or limit is refused for good (HTTP 403, a fatal
// websocket error without retry and close status 1008; the reason names
// the quota, its value and the token or service) before anything of it
// is stored, and counted in cbdash_collector_agent_refused_total by the
// quota's reason (trust.go). What counts: an instance from its admitted
// hello until live state forgets it (Config.GoneAfter after it went
// silent and disconnected) with the breakers its last hello declared; a
// dependency for as long as the collector holds it (while an instance
// declares it). A hello replaces what its instance's last one declared:
// the dependencies only that instance declared and the hello no longer
// does are not counted against it (a re-hello or a restart that renames
// breakers). The dependency quotas refuse only a hello that adds a
// dependency the collector does not hold: a hello that declares known
// dependencies again (a reconnection, a restart, a new instance of a
// known service) is never refused by them. A new instance over an
// instance quota takes the place of the longest-silent offline instance
// of its service and token (no connection, silent for Config.StaleAfter),
// which is forgotten at once (the dependencies only it declared are not
// counted against the new one), so that a service restarted under new
// instance names is not refused while its old instances wait to be
// forgotten. The zero value of every field is
// its default; the serve flags of the same names set them.
type Limits struct {
	// MaxInstancesPerToken is how many instances (service and instance
	// id) one agent token may have known to the collector at once; 0 =
	// 10,000.
	MaxInstancesPerToken int
	// MaxInstancesPerService is how many instances one service may have
	// known to the collector at once, whatever the tokens; 0 = 5,000
	// (half of a token's: one service of a shared "*" token leaves room
	// for the others).
	MaxInstancesPerService int
	// MaxBreakersPerToken is how many breakers the instances of one agent
	// token may declare in all (each instance's hello counted); 0 =
	// 200,000 (10,000 instances of 20 breakers).
	MaxBreakersPerToken int
	// MaxBreakersPerService is how many breakers the instances of one
	// service may declare in all; 0 = 100,000 (5,000 instances of 20).
	MaxBreakersPerService int
	// MaxDependencies is how many dependencies (service and breaker
	// name) the collector holds, whatever the token; a hello that would
	// add more is refused; 0 = 10,000.
	MaxDependencies int
	// MaxDependenciesPerToken is how many dependencies the instances of
	// one agent token may declare in all; a hello that adds dependencies
	// the collector does not hold and would take the token past it is
	// refused. It must be below MaxDependencies; 0 = half of it (5,000
	// by default): a "*" token serving a whole fleet needs many, and two
	// tokens are needed to fill the collector.
	MaxDependenciesPerToken int
	// MaxDependenciesPerService is how many dependencies one service may
	// have, whatever the tokens; 0 = 1,000 (a tenth of MaxDependencies'
	// default, and as many as one hello may declare).
	MaxDependenciesPerService int
	// MaxConnectionsPerToken is how many websocket connections one agent
	// token may hold open at once, before their hello too (each waits up
	// to HelloTimeout for it); 0 = 10,000. One more is refused with a
	// retry-later error: "too many connections for this agent token".
	MaxConnectionsPerToken int
	// RehelloBurst and RehelloEvery bound the hellos an agent may send on
	// one open connection (to declare breakers registered since, see
	// docs/protocol.md): RehelloBurst at once, then one per RehelloEvery;
	// 0 = 30 and 1 s. One more ends the connection with a retry-later
	// error ("too many hellos on one connection"); the agent reconnects
	// and its hello declares everything.
	RehelloBurst int
	RehelloEvery time.Duration
}

// SetDefaults sets the zero fields to their defaults.
func (l *Limits) SetDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxInstancesPerToken, 10000)
	def(&l.MaxInstancesPerService, 5000)
	def(&l.MaxBreakersPerToken, 200000)
	def(&l.MaxBreakersPerService, 100000)
	def(&l.MaxDependencies, 10000)
	def(&l.MaxDependenciesPerToken, max(1, l.MaxDependencies/2))
	def(&l.MaxDependenciesPerService, 1000)
	def(&l.MaxConnectionsPerToken, 10000)
	def(&l.RehelloBurst, 30)
	if l.RehelloEvery == 0 {
		l.RehelloEvery = time.Second
	}
}

// Validate checks limits whose defaults are set: an error wrapping
// cbdash.ErrInvalid names the bad one.
func (l Limits) Validate() error {
	for _, v := range []int{l.MaxInstancesPerToken, l.MaxInstancesPerService, l.MaxBreakersPerToken, l.MaxBreakersPerService,
		l.MaxDependencies, l.MaxDependenciesPerToken, l.MaxDependenciesPerService, l.MaxConnectionsPerToken, l.RehelloBurst} {
		if v < 0 {
			return fmt.Errorf("%w: Limits: no limit may be negative (0 = the default)", cbdash.ErrInvalid)
		}
	}
	if l.RehelloEvery < 0 {
		return fmt.Errorf("%w: Limits: RehelloEvery must not be negative", cbdash.ErrInvalid)
	}
	if l.MaxDependencies > 1 && l.MaxDependenciesPerToken >= l.MaxDependencies {
		return fmt.Errorf("%w: Limits: MaxDependenciesPerToken (%d) must be below MaxDependencies (%d): one agent token must not be able to fill the collector",
			cbdash.ErrInvalid, l.MaxDependenciesPerToken, l.MaxDependencies)
	}
	return nil
}

// reservation is how long an admitted hello counts although live state
// does not show it yet (its register is in progress, or failed).
const reservation = time.Minute

// tokenUsage tracks which instances each agent token's hellos declared,
// and each service's, to bound them (see Limits). Safe for concurrent
// use; its lock is taken before live state's.
type tokenUsage struct {
	mu      sync.Mutex
	byToken map[string]*quotaUse // token id -> its instances
	bySvc   map[string]*quotaUse // service -> its instances, every token's
	tokenOf map[live.Key]string
	newDeps map[cbdash.DependencyKey]time.Time // admitted, maybe not yet in live state
}

// quotaUse is what the instances of one token, or of one service,
// declared.
type quotaUse struct {
	instances map[live.Key]use
	breakers  int // declared by instances, in all
	// deps counts, for a token, the instances declaring each dependency;
	// nil for a service (live state counts those, live.perService).
	deps map[cbdash.DependencyKey]int
}

// use is what one instance's last admitted hello declared.
type use struct {
	breakers []protocol.BreakerConfig // the hello's, shared with live state (sharedLists; never written)
	at       time.Time
}

func newTokenUsage() *tokenUsage {
	return &tokenUsage{byToken: map[string]*quotaUse{}, bySvc: map[string]*quotaUse{}, tokenOf: map[live.Key]string{}, newDeps: map[cbdash.DependencyKey]time.Time{}}
}

// noUse is the use of a token or service that has none.
var noUse = &quotaUse{}

func (u *tokenUsage) of(m map[string]*quotaUse, key string) *quotaUse {
	if q := m[key]; q != nil {
		return q
	}
	return noUse
}

// add counts k's hello (its breakers) against token tokenID and its
// service, in place of what k declared before.
func (u *tokenUsage) add(tokenID string, k live.Key, breakers []protocol.BreakerConfig, now time.Time) {
	u.remove(k)
	x := use{breakers: breakers, at: now}
	tq := u.byToken[tokenID]
	if tq == nil {
		tq = &quotaUse{instances: map[live.Key]use{}, deps: map[cbdash.DependencyKey]int{}}
		u.byToken[tokenID] = tq
	}
	sq := u.bySvc[k.Service]
	if sq == nil {
		sq = &quotaUse{instances: map[live.Key]use{}}
		u.bySvc[k.Service] = sq
	}
	for _, q := range []*quotaUse{tq, sq} {
		q.instances[k] = x
		q.breakers += len(breakers)
	}
	for _, b := range breakers {
		tq.deps[cbdash.DependencyKey{Service: k.Service, Breaker: b.Name}]++
	}
	u.tokenOf[k] = tokenID
}

// remove stops counting instance k.
func (u *tokenUsage) remove(k live.Key) {
	tokenID, ok := u.tokenOf[k]
	if !ok {
		return
	}
	delete(u.tokenOf, k)
	tq, sq := u.byToken[tokenID], u.bySvc[k.Service]
	x := tq.instances[k]
	for _, q := range []*quotaUse{tq, sq} {
		delete(q.instances, k)
		q.breakers -= len(x.breakers)
	}
	for _, b := range x.breakers {
		dk := cbdash.DependencyKey{Service: k.Service, Breaker: b.Name}
		if tq.deps[dk]--; tq.deps[dk] <= 0 {
			delete(tq.deps, dk)
		}
	}
	if len(tq.instances) == 0 {
		delete(u.byToken, tokenID)
	}
	if len(sq.instances) == 0 {
		delete(u.bySvc, k.Service)
	}
}

// pruneLocked stops counting q's instances that live state has forgotten
// (and that are not admitted hellos still being registered). u.mu is
// held, and live state's lock (lq).
func (u *tokenUsage) pruneLocked(q *quotaUse, lq live.Quotas, now time.Time) {
	for ik, x := range q.instances {
		if !lq.Known(ik) && now.Sub(x.at) > reservation {
			u.remove(ik)
		}
	}
}

// tally is what a hello would bring its token, its service and the
// collector to, the instance it replaces (the same service and instance)
// not counted: neither its breakers nor the dependencies only it
// declares that the hello no longer does (a re-hello that renames its
// breakers replaces them, it does not add to them).
type tally struct {
	tokenInstances, serviceInstances int
	tokenBreakers, serviceBreakers   int // the others' breakers
	helloBreakers                    int // the hello's
	tokenDeps                        int // the token's dependencies with the hello
	// serviceDeps and deps are the service's and the collector's
	// dependencies, held or reserved, less the dropped ones.
	serviceDeps, deps int
	// dropped is how many dependencies (of the hello's service) the
	// collector would forget once the hello replaces its instance's last
	// one (and an offline instance it takes the place of is forgotten):
	// declared by those instances only, and not by the hello.
	dropped int
	fresh   []cbdash.DependencyKey
}

// admitLimits checks hello h of agent token tokenID against the limits
// and quotas and, when it fits, counts it; h's breaker list may then be
// replaced by an equal one (shared as live.State.Hello shares them). It is
// called before the hello is registered, on every hello (a new connection, a hello on an open
// connection, an HTTP ingest whose hello changed).
func (c *Pipeline) admitLimits(tokenID string, h *protocol.Hello, now time.Time) *refusal {
	u := c.tokens
	u.mu.Lock()
	defer u.mu.Unlock()
	var rf *refusal
	c.live.Quotas(func(lq live.Quotas) { rf = c.admitLimitsLocked(lq, tokenID, h, now) })
	return rf
}

// admitLimitsLocked is admitLimits under the token usage's lock and live
// state's.
func (c *Pipeline) admitLimitsLocked(lq live.Quotas, tokenID string, h *protocol.Hello, now time.Time) *refusal {
	u := c.tokens
	t := u.tallyLocked(lq, tokenID, h, now)
	if c.cfg.Limits.over(t) {
		// The counts may hold instances live state has forgotten since:
		// drop those (a walk over the token's and the service's
		// instances, done only when it matters) and count again.
		u.pruneLocked(u.of(u.byToken, tokenID), lq, now)
		u.pruneLocked(u.of(u.bySvc, h.Service), lq, now)
		t = u.tallyLocked(lq, tokenID, h, now)
	}
	evict := c.evictionLocked(lq, &t, tokenID, h, now)
	if rf := c.overQuota(tokenID, h, t); rf != nil {
		return rf
	}
	if evict.Service != "" {
		c.log.Info("an offline instance is forgotten to make room for a new one of its service under the instance quotas",
			"service", evict.Service, "forgotten", evict.Instance, "new", h.Instance, "token", store.AgentTokenRef(tokenID))
		lq.Forget(evict)
		u.remove(evict)
	}
	// The list counted is the one live state keeps (an equal list of an
	// earlier hello of the service, as live.State.Hello would pick it), not a
	// copy per instance.
	h.Breakers = lq.Share(h.Service, h.Breakers)
	u.add(tokenID, live.Key{Service: h.Service, Instance: h.Instance}, h.Breakers, now)
	for _, dk := range t.fresh {
		u.newDeps[dk] = now
	}
	return nil
}

// evictionLocked picks the instance a new instance over an instance
// quota takes the place of, the longest-silent offline instance of its
// service and token: no connection here and silent for Config.StaleAfter
// (an instance connected to another collector of the cluster is not
// silent). It takes what that instance declares off t; none (a zero key)
// when the hello is under the instance quotas or no instance is offline.
func (c *Pipeline) evictionLocked(lq live.Quotas, t *tally, tokenID string, h *protocol.Hello, now time.Time) (evict live.Key) {
	lim := c.cfg.Limits
	if t.tokenInstances+1 <= lim.MaxInstancesPerToken && t.serviceInstances+1 <= lim.MaxInstancesPerService {
		return live.Key{}
	}
	k := live.Key{Service: h.Service, Instance: h.Instance}
	mine := c.tokens.of(c.tokens.byToken, tokenID)
	var oldest time.Time
	for ik := range mine.instances {
		if ik.Service != h.Service || ik == k {
			continue
		}
		seen, ok := lq.Offline(ik)
		if !ok || now.Sub(seen) <= c.cfg.StaleAfter {
			continue
		}
		if evict.Service == "" || seen.Before(oldest) {
			evict, oldest = ik, seen
		}
	}
	if evict.Service != "" {
		n := len(mine.instances[evict].breakers)
		t.tokenInstances--
		t.serviceInstances--
		t.tokenBreakers -= n
		t.serviceBreakers -= n
		t.evicting(lq, mine, evict, h)
	}
	return evict
}

// tallyLocked counts what hello h of token tokenID would bring its token,
// its service and the collector to. It drops the reservations of new
// dependencies that live state holds by now, or that have expired. u.mu
// is held, and live state's lock (lq).
func (u *tokenUsage) tallyLocked(lq live.Quotas, tokenID string, h *protocol.Hello, now time.Time) tally {
	k := live.Key{Service: h.Service, Instance: h.Instance}
	mine, svc := u.of(u.byToken, tokenID), u.of(u.bySvc, h.Service)
	var t tally
	t.tokenInstances, t.tokenBreakers = others(mine, k)
	t.serviceInstances, t.serviceBreakers = others(svc, k)
	t.serviceDeps = u.reservedLocked(lq, h.Service, now) + lq.ServiceDependencies(h.Service)
	t.deps = lq.Dependencies() + len(u.newDeps)
	t.helloBreakers = len(h.Breakers)
	names := make(map[string]bool, len(h.Breakers))
	t.tokenDeps = len(mine.deps)
	for _, b := range h.Breakers {
		dk := cbdash.DependencyKey{Service: h.Service, Breaker: b.Name}
		names[b.Name] = true
		if mine.deps[dk] == 0 {
			t.tokenDeps++
		}
		if !lq.Holds(dk) {
			if _, ok := u.newDeps[dk]; !ok {
				t.fresh = append(t.fresh, dk)
			}
		}
	}
	if x, ok := mine.instances[k]; ok {
		for _, b := range x.breakers {
			if !names[b.Name] && mine.deps[cbdash.DependencyKey{Service: h.Service, Breaker: b.Name}] == 1 {
				t.tokenDeps--
			}
		}
	}
	// The service's and the collector's: live state forgets the
	// instance's breakers the hello does not declare (declareLocked), and
	// with them the dependencies no other instance declares, whatever
	// its token.
	for name, members := range lq.Declared(k) {
		if !names[name] && members == 1 {
			t.dropped++
		}
	}
	t.serviceDeps -= t.dropped
	t.deps -= t.dropped
	return t
}

// others returns the instances q counts and the breakers they declare,
// instance k's not counted.
func others(q *quotaUse, k live.Key) (instances, breakers int) {
	instances, breakers = len(q.instances), q.breakers
	if x, ok := q.instances[k]; ok {
		instances--
		breakers -= len(x.breakers)
	}
	return instances, breakers
}

// reservedLocked drops the reservations of new dependencies that live
// state holds by now, or that have expired, and returns how many of the
// others are service's.
func (u *tokenUsage) reservedLocked(lq live.Quotas, service string, now time.Time) int {
	n := 0
	for dk, at := range u.newDeps {
		if lq.Holds(dk) || now.Sub(at) > reservation {
			delete(u.newDeps, dk)
		} else if dk.Service == service {
			n++
		}
	}
	return n
}

// evicting takes off t's dependency counts those that forgetting offline
// instance ev (of h's service and token, whose use is mine) to make room
// for hello h leaves no instance to declare: declared by ev, not by h,
// and by no other instance but h's, whose breakers h replaces (those
// tallyLocked took off already when only h's instance declared them).
func (t *tally) evicting(lq live.Quotas, mine *quotaUse, ev live.Key, h *protocol.Hello) {
	k := live.Key{Service: h.Service, Instance: h.Instance}
	names := make(map[string]bool, len(h.Breakers))
	for _, b := range h.Breakers {
		names[b.Name] = true
	}
	for name, members := range lq.Declared(ev) {
		if names[name] {
			continue
		}
		others := members - 1
		if lq.Declares(k, name) {
			others--
		}
		if others == 0 {
			t.dropped++
			t.serviceDeps--
			t.deps--
		}
	}
	prev := map[string]bool{}
	for _, b := range mine.instances[k].breakers {
		prev[b.Name] = true
	}
	for _, b := range mine.instances[ev].breakers {
		if names[b.Name] {
			continue
		}
		others := mine.deps[cbdash.DependencyKey{Service: h.Service, Breaker: b.Name}] - 1
		if prev[b.Name] {
			others--
		}
		if others == 0 {
			t.tokenDeps--
		}
	}
}

// over reports whether tally t passes a quota or limit (see overQuota).
func (lim Limits) over(t tally) bool {
	fresh := len(t.fresh)
	return t.serviceInstances+1 > lim.MaxInstancesPerService || t.tokenInstances+1 > lim.MaxInstancesPerToken ||
		t.serviceBreakers+t.helloBreakers > lim.MaxBreakersPerService || t.tokenBreakers+t.helloBreakers > lim.MaxBreakersPerToken ||
		fresh > 0 && (t.serviceDeps+fresh > lim.MaxDependenciesPerService || t.tokenDeps > lim.MaxDependenciesPerToken || t.deps+fresh > lim.MaxDependencies)
}

// overQuota returns the refusal of hello h of token tokenID when tally t
// passes a quota or limit (counted in the metric), or nil.
func (c *Pipeline) overQuota(tokenID string, h *protocol.Hello, t tally) *refusal {
	lim := c.cfg.Limits
	tok := store.AgentTokenRef(tokenID)
	svc := truncate(h.Service, 100)
	deny := func(reason, format string, args ...any) *refusal {
		c.metrics.distrusted(reason)
		return refuse(cbdash.ErrForbidden, format, args...)
	}
	n := len(h.Breakers)
	newDeps := len(t.fresh) > 0
	switch {
	case t.serviceInstances+1 > lim.MaxInstancesPerService:
		return deny(refusedServiceInstances, "service %q already has %d instances, the most one service may have (serve flag --max-instances-per-service=%d); instance %q is refused (forbidden)",
			svc, t.serviceInstances, lim.MaxInstancesPerService, truncate(h.Instance, 100))
	case t.tokenInstances+1 > lim.MaxInstancesPerToken:
		return deny(refusedInstances, "agent token %s already has %d instances, the most one token may have (serve flag --max-instances-per-token=%d); instance %q is refused (forbidden)",
			tok, t.tokenInstances, lim.MaxInstancesPerToken, truncate(h.Instance, 100))
	case t.serviceBreakers+n > lim.MaxBreakersPerService:
		return deny(refusedServiceBreakers, "the instances of service %q declare %d breakers; %d more would pass the %d one service may have (serve flag --max-breakers-per-service) (forbidden)",
			svc, t.serviceBreakers, n, lim.MaxBreakersPerService)
	case t.tokenBreakers+n > lim.MaxBreakersPerToken:
		return deny(refusedBreakers, "agent token %s's instances declare %d breakers; %d more would pass the %d one token may have (serve flag --max-breakers-per-token) (forbidden)",
			tok, t.tokenBreakers, n, lim.MaxBreakersPerToken)
	case newDeps && t.serviceDeps+len(t.fresh) > lim.MaxDependenciesPerService:
		return deny(refusedServiceDependencies, "service %q has %d dependencies%s; %d new ones would pass the %d one service may have (serve flag --max-dependencies-per-service) (forbidden)",
			svc, t.serviceDeps, t.besidesDropped(), len(t.fresh), lim.MaxDependenciesPerService)
	case newDeps && t.tokenDeps > lim.MaxDependenciesPerToken:
		return deny(refusedTokenDependencies, "agent token %s's instances would declare %d dependencies (%d of them new), past the %d one token may have (serve flag --max-dependencies-per-token) (forbidden)",
			tok, t.tokenDeps, len(t.fresh), lim.MaxDependenciesPerToken)
	case newDeps && t.deps+len(t.fresh) > lim.MaxDependencies:
		return deny(refusedDependencies, "the collector holds %d dependencies%s; %d new ones would pass its limit of %d (serve flag --max-dependencies) (forbidden)",
			t.deps, t.besidesDropped(), len(t.fresh), lim.MaxDependencies)
	}
	return nil
}

// besidesDropped is what a refusal says of the dependencies tally t does
// not count because the hello drops them: "" when there are none.
func (t tally) besidesDropped() string {
	if t.dropped == 0 {
		return ""
	}
	return fmt.Sprintf(" besides the %d that no instance would declare after this hello", t.dropped)
}
