package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// Instance is one simulated instance of a service: its own agent, its own
// HTTP client whose breaker Transport keeps one breaker per dependency,
// and a traffic loop. Its methods are safe for concurrent use.
type Instance struct {
	Service, ID string

	log   *slog.Logger
	clk   clock.Clock
	agent *agent.Agent
	// transports keep one breaker per dependency: the fleet's breaker
	// configuration in transports[false], the one without slow-call
	// detection (DependencySpec.NoSlowCalls) in transports[true]; byDep
	// says which a dependency's breaker is in.
	transports map[bool]*breaker.Transport
	byDep      map[string]*breaker.Transport
	base       *http.Transport
	client     *http.Client
	deps       []target

	mu    sync.Mutex
	cache map[string]cached // last good answer per dependency

	requests, dropped, degraded atomic.Uint64
}

type target struct{ name, url string }

type cached struct {
	body []byte
	at   time.Time
}

// Labels of the instances: a region each, and a canary version on the
// last instance of a service with more than two.
func labels(svc ServiceSpec, n int) map[string]string {
	l := map[string]string{"region": []string{"eu-west-1", "us-east-1"}[n%2], "version": "1.4.2", "team": svc.Name}
	if svc.Instances > 2 && n == svc.Instances {
		l["version"] = "1.5.0-canary"
	}
	return l
}

// newInstance makes instance n (from 1) of svc; its agent is started.
func newInstance(svc ServiceSpec, n int, urls map[string]string, noSlow map[string]bool, cfg FleetConfig) (*Instance, error) {
	id := fmt.Sprintf("%s-%d", svc.Name, n)
	inst := &Instance{Service: svc.Name, ID: id, log: cfg.Logger.With("component", "demo", "service", svc.Name, "instance", id), clk: cfg.Clock, cache: map[string]cached{}}
	a, err := agent.New(agent.Config{
		URL: cfg.CollectorURL, Token: cfg.Token, Service: svc.Name, Instance: id,
		Labels: labels(svc, n), ReportInterval: cfg.ReportInterval, Logger: cfg.Logger, Clock: cfg.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("demo: agent of %s: %w", id, err)
	}
	inst.agent = a
	bc := *cfg.Breaker
	bc.Clock = cfg.Clock
	if l := labels(svc, n); l["version"] != "1.4.2" {
		// The canary ships a different threshold: the dashboard shows the
		// configuration drift between instances.
		bc.FailureRateThreshold = 60
	}
	byHost := map[string]string{}
	for _, name := range svc.Dependencies {
		u, ok := urls[name]
		if !ok {
			return nil, fmt.Errorf("demo: service %s calls unknown dependency %q", svc.Name, name)
		}
		inst.deps = append(inst.deps, target{name: name, url: u})
		byHost[u[len("http://"):]] = name
	}
	var regErr error
	inst.base = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     30 * time.Second,
	}
	inst.transports, inst.byDep = map[bool]*breaker.Transport{}, map[string]*breaker.Transport{}
	for _, off := range []bool{false, true} {
		c := bc
		if off {
			c.SlowCallDuration = 0
		}
		inst.transports[off] = breaker.NewTransport(inst.base, breaker.TransportConfig{
			Config:     c,
			BreakerFor: func(r *http.Request) string { return byHost[r.URL.Host] },
			OnNew: func(b *breaker.Breaker) {
				if err := a.Register(b); err != nil && regErr == nil {
					regErr = err
				}
			},
		})
	}
	for _, d := range inst.deps {
		inst.byDep[d.name] = inst.transports[noSlow[d.name]]
	}
	inst.client = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return inst.byDep[byHost[r.URL.Host]].RoundTrip(r)
	})}
	for _, d := range inst.deps {
		if _, err := inst.byDep[d.name].Breaker(d.name); err != nil {
			return nil, fmt.Errorf("demo: breaker %s of %s: %w", d.name, id, err)
		}
	}
	if regErr != nil {
		return nil, fmt.Errorf("demo: register breakers of %s: %w", id, regErr)
	}
	if err := a.Start(); err != nil {
		return nil, fmt.Errorf("demo: start agent of %s: %w", id, err)
	}
	return inst, nil
}

// Breakers are the instance's breakers, one per dependency.
func (i *Instance) Breakers() []*breaker.Breaker {
	return append(i.transports[false].Breakers(), i.transports[true].Breakers()...)
}

// roundTripFunc is a function as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// InstanceStats count an instance's traffic.
type InstanceStats struct {
	Requests uint64 // requests served
	Dropped  uint64 // requests not started: too many in flight
	Degraded uint64 // dependency calls answered by a fallback
}

// Stats returns the instance's counters.
func (i *Instance) Stats() InstanceStats {
	return InstanceStats{Requests: i.requests.Load(), Dropped: i.dropped.Load(), Degraded: i.degraded.Load()}
}

// maxInFlight bounds an instance's requests in flight, so that a slow
// dependency cannot pile up goroutines.
const maxInFlight = 64

// serve runs the traffic loop until ctx is done: rate requests per second,
// each calling every dependency at once. It returns once every request
// has ended.
func (i *Instance) serve(ctx context.Context, rate float64) {
	tick, stop := i.clk.NewTicker(time.Duration(float64(time.Second) / rate))
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxInFlight)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		select {
		case sem <- struct{}{}:
		default:
			i.dropped.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			i.handle(ctx)
		}()
	}
}

// handle serves one request: it calls every dependency concurrently.
func (i *Instance) handle(ctx context.Context) {
	i.requests.Add(1)
	var wg sync.WaitGroup
	for _, d := range i.deps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i.call(ctx, d)
		}()
	}
	wg.Wait()
}

// call asks dependency d through the breaker Transport. A rejection, a
// connection error, a timeout or a 5xx is answered by the fallback, whose
// result is counted on d's breaker. Business errors (4xx) are answers.
func (i *Instance) call(ctx context.Context, d target) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/"+d.name+"?from="+i.ID, nil)
	if err != nil {
		i.log.Error("building a request", "err", err)
		return
	}
	resp, err := i.client.Do(req)
	if err == nil {
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if rerr == nil && resp.StatusCode < 500 {
			if resp.StatusCode < 300 {
				i.remember(d.name, body)
			}
			return
		}
		err = fmt.Errorf("%s: HTTP %d", d.name, resp.StatusCode)
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return // shutting down
	}
	i.degraded.Add(1)
	i.log.Debug("dependency call failed; serving the fallback", "dependency", d.name, "err", err)
	b, berr := i.byDep[d.name].Breaker(d.name)
	if berr != nil {
		return
	}
	b.RecordFallback(i.fallback(d.name, i.clk.Now()))
}

func (i *Instance) remember(dep string, body []byte) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.cache[dep] = cached{body: body, at: i.clk.Now()}
}

// errNoFallback is the fallback's failure: no fresh cached answer and no
// safe default.
var errNoFallback = errors.New("no cached answer and no safe default")

// freshFor is how long a cached answer may stand in for the dependency.
const freshFor = 10 * time.Second

// fallback answers for dependency dep from the cache when it is fresh,
// else from a default where one is safe (stock: assume available;
// recommendations and search: popular items). Payments and pricing have
// no safe default.
func (i *Instance) fallback(dep string, now time.Time) error {
	i.mu.Lock()
	c, ok := i.cache[dep]
	i.mu.Unlock()
	if ok && now.Sub(c.at) < freshFor {
		return nil
	}
	switch dep {
	case "inventory", "recommendations", "search":
		return nil
	}
	return fmt.Errorf("%s: %w (last answer %s ago)", dep, errNoFallback, ageOf(c, ok, now))
}

func ageOf(c cached, ok bool, now time.Time) string {
	if !ok {
		return "never"
	}
	return strconv.FormatFloat(now.Sub(c.at).Seconds(), 'f', 0, 64) + "s"
}

// close stops the agent (flushing until ctx ends) and the idle
// connections.
func (i *Instance) close(ctx context.Context) error {
	defer i.base.CloseIdleConnections()
	return i.agent.Close(ctx)
}
