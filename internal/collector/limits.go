package collector

import (
	"fmt"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Limits bound what agents can make the collector hold, beyond the
// protocol's per-hello limits (protocol.MaxBreakersPerHello):
// an agent token is deployed on every instance of a service, so whoever
// has one must not be able to fill the server's memory with instances,
// breakers or dependencies. A hello over a limit is refused (HTTP 403, a
// fatal websocket error with the reason, which the agent logs) before
// anything of it is stored, and counted in
// cbdash_collector_agent_refused_total. The zero value of every field is
// its default; the serve flags of the same names set them.
type Limits struct {
	// MaxInstancesPerToken is how many instances (service and instance
	// id) one agent token may have known to the collector at once; 0 =
	// 10,000. An instance is forgotten, and no longer counts, after
	// Config.GoneAfter of silence.
	MaxInstancesPerToken int
	// MaxBreakersPerToken is how many breakers the instances of one agent
	// token may declare in all (each instance's hello counted); 0 =
	// 200,000 (10,000 instances of 20 breakers).
	MaxBreakersPerToken int
	// MaxDependencies is how many dependencies (service and breaker
	// name) the collector holds, whatever the token; a hello that would
	// add more is refused; 0 = 10,000.
	MaxDependencies int
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

func (l *Limits) setDefaults() {
	if l.MaxInstancesPerToken == 0 {
		l.MaxInstancesPerToken = 10000
	}
	if l.MaxBreakersPerToken == 0 {
		l.MaxBreakersPerToken = 200000
	}
	if l.MaxDependencies == 0 {
		l.MaxDependencies = 10000
	}
	if l.MaxConnectionsPerToken == 0 {
		l.MaxConnectionsPerToken = 10000
	}
	if l.RehelloBurst == 0 {
		l.RehelloBurst = 30
	}
	if l.RehelloEvery == 0 {
		l.RehelloEvery = time.Second
	}
}

func (l Limits) validate() error {
	if l.MaxInstancesPerToken < 0 || l.MaxBreakersPerToken < 0 || l.MaxDependencies < 0 || l.MaxConnectionsPerToken < 0 || l.RehelloBurst < 0 || l.RehelloEvery < 0 {
		return fmt.Errorf("%w: Limits: MaxInstancesPerToken, MaxBreakersPerToken, MaxDependencies, MaxConnectionsPerToken, RehelloBurst and RehelloEvery must not be negative", cbdash.ErrInvalid)
	}
	return nil
}

// reservation is how long an admitted hello counts although live state
// does not show it yet (its register is in progress, or failed).
const reservation = time.Minute

// tokenUsage tracks which instances each agent token's hellos declared,
// to bound them (see Limits). Safe for concurrent use.
type tokenUsage struct {
	mu      sync.Mutex
	byToken map[string]map[instKey]use // token id -> its instances
	tokenOf map[instKey]string
	newDeps map[cbdash.DependencyKey]time.Time // admitted, maybe not yet in live state
}

// use is what one instance's last admitted hello declared.
type use struct {
	breakers int
	at       time.Time
}

func newTokenUsage() *tokenUsage {
	return &tokenUsage{byToken: map[string]map[instKey]use{}, tokenOf: map[instKey]string{}, newDeps: map[cbdash.DependencyKey]time.Time{}}
}

// admitLimits checks hello h of agent token tokenID against the limits
// and, when it fits, counts it. It is called before the hello is
// registered, on every hello (a new connection, a hello on an open
// connection, every HTTP ingest).
func (c *Collector) admitLimits(tokenID string, h *protocol.Hello, now time.Time) *refusal {
	lim := c.cfg.Limits
	u := c.tokens
	u.mu.Lock()
	defer u.mu.Unlock()
	k := instKey{h.Service, h.Instance}
	mine := u.byToken[tokenID]
	instances, breakers := 0, 0
	var fresh []cbdash.DependencyKey
	deps := 0
	c.live.mu.Lock()
	for ik, x := range mine {
		if c.live.instances[ik] == nil && now.Sub(x.at) > reservation {
			delete(mine, ik) // forgotten by live state
			delete(u.tokenOf, ik)
			continue
		}
		if ik != k {
			instances++
			breakers += x.breakers
		}
	}
	for dk, at := range u.newDeps {
		if c.live.deps[dk] != nil || now.Sub(at) > reservation {
			delete(u.newDeps, dk)
		}
	}
	for _, b := range h.Breakers {
		dk := cbdash.DependencyKey{Service: h.Service, Breaker: b.Name}
		if c.live.deps[dk] == nil {
			if _, ok := u.newDeps[dk]; !ok {
				fresh = append(fresh, dk)
			}
		}
	}
	deps = len(c.live.deps) + len(u.newDeps)
	c.live.mu.Unlock()

	switch {
	case instances+1 > lim.MaxInstancesPerToken:
		c.metrics.distrusted(refusedInstances)
		return refuse(cbdash.ErrForbidden, "this agent token already has %d instances, the most one token may have (serve flag --max-instances-per-token); instance %s is refused (forbidden)",
			instances, truncate(h.Instance, 100))
	case breakers+len(h.Breakers) > lim.MaxBreakersPerToken:
		c.metrics.distrusted(refusedBreakers)
		return refuse(cbdash.ErrForbidden, "this agent token's instances declare %d breakers; %d more would pass the %d one token may have (serve flag --max-breakers-per-token) (forbidden)",
			breakers, len(h.Breakers), lim.MaxBreakersPerToken)
	case len(fresh) > 0 && deps+len(fresh) > lim.MaxDependencies:
		c.metrics.distrusted(refusedDependencies)
		return refuse(cbdash.ErrForbidden, "the collector holds %d dependencies; %d new ones would pass its limit of %d (serve flag --max-dependencies) (forbidden)",
			deps, len(fresh), lim.MaxDependencies)
	}
	if prev, ok := u.tokenOf[k]; ok && prev != tokenID {
		delete(u.byToken[prev], k)
	}
	if mine == nil {
		mine = map[instKey]use{}
		u.byToken[tokenID] = mine
	}
	mine[k] = use{breakers: len(h.Breakers), at: now}
	u.tokenOf[k] = tokenID
	for _, dk := range fresh {
		u.newDeps[dk] = now
	}
	return nil
}
