package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// DependencySpec names a dependency server of the fleet and where in the
// script it starts.
type DependencySpec struct {
	Name   string
	Offset time.Duration
	// Script, when not nil, is this dependency's own fault script instead
	// of the fleet's (FleetConfig.Script).
	Script *Script
	// NoSlowCalls turns slow-call detection off in this dependency's
	// breakers (SlowCallDuration 0): they trip on the failure rate its
	// script sets, never on latencies a busy machine stretches.
	NoSlowCalls bool
}

// ServiceSpec is one service of the fleet: how many instances it runs and
// which dependencies each instance calls for every request it serves.
type ServiceSpec struct {
	Name         string
	Instances    int
	Dependencies []string
}

// DefaultDependencies are the demo's dependency servers. Their offsets
// into DefaultScript are chosen so that, within the first minute, some
// breaker trips on failure rate, one on slow calls, probes fail during an
// outage and succeed during a recovery, while business errors trip
// nothing; inventory follows ClimbingScript, so its failure rate is seen
// rising through the headroom bar for half a minute before it trips.
func DefaultDependencies() []DependencySpec {
	s := time.Second
	climbing := ClimbingScript()
	return []DependencySpec{
		{Name: "payments", Offset: 4 * s}, // error burst after 2 s, then outage and recovery
		// Failures climb for 40 s, trip about 25 s in, recover. Its answers
		// are fast, but a busy machine makes calls slow: its breakers trip
		// on the failure rate alone, on the script's schedule.
		{Name: "inventory", Offset: 0, Script: &climbing, NoSlowCalls: true},
		{Name: "pricing", Offset: 0},              // the script from its start
		{Name: "recommendations", Offset: 20 * s}, // slow recovery first, creeping latency at 24 s
		{Name: "search", Offset: 10 * s},          // outage after 2 s
	}
}

// DefaultServices are the demo's services.
func DefaultServices() []ServiceSpec {
	return []ServiceSpec{
		{Name: "checkout", Instances: 3, Dependencies: []string{"payments", "inventory", "pricing"}},
		{Name: "search", Instances: 2, Dependencies: []string{"search", "recommendations"}},
		{Name: "catalog", Instances: 2, Dependencies: []string{"inventory", "pricing", "recommendations"}},
	}
}

// BreakerConfig is the configuration of every breaker of the demo: small
// windows and short open durations, so that breakers open and close
// within seconds.
func BreakerConfig() breaker.Config {
	return breaker.Config{
		Window:                   breaker.Window{Kind: breaker.CountWindow, Size: 20},
		MinimumCalls:             10,
		FailureRateThreshold:     50,
		SlowCallDuration:         250 * time.Millisecond,
		SlowCallRateThreshold:    50,
		OpenDuration:             5 * time.Second,
		OpenBackoff:              breaker.Backoff{Multiplier: 1.5, Max: 15 * time.Second, Jitter: 0.1},
		HalfOpenMaxCalls:         2,
		HalfOpenSuccessThreshold: 3,
		CallTimeout:              time.Second,
		MaxConcurrent:            50,
	}
}

// FleetConfig configures a simulated fleet. Only CollectorURL is
// required; every other zero field takes the demo's default.
type FleetConfig struct {
	// CollectorURL is the collector's agent endpoint
	// (ws://127.0.0.1:8080/api/v1/agent).
	CollectorURL string
	// Token is the agent token every instance uses.
	Token string
	// Script is what every dependency server follows (zero =
	// DefaultScript()).
	Script Script
	// Dependencies and Services shape the fleet (nil = the defaults).
	Dependencies []DependencySpec
	Services     []ServiceSpec
	// Rate is how many requests per second each instance serves (0 = 25).
	Rate float64
	// Breaker configures every breaker (nil = BreakerConfig()); its Clock
	// is replaced by Clock.
	Breaker *breaker.Config
	// ReportInterval is the agents' report interval (0 = their default,
	// 1 s).
	ReportInterval time.Duration
	// Clock is the fleet's time: the fault script, the instances' request
	// ticks and fallback cache, and every breaker and agent read it (nil =
	// clock.System()). The demo passes the server's one clock.
	Clock clock.Clock
	// Logger receives the fleet's and the agents' logs (nil = discard);
	// the fleet's own lines carry component=demo.
	Logger *slog.Logger
}

func (c *FleetConfig) setDefaults() error {
	if c.CollectorURL == "" {
		return errors.New("demo: FleetConfig.CollectorURL is required")
	}
	if c.Script.Phases == nil {
		c.Script = DefaultScript()
	}
	if c.Dependencies == nil {
		c.Dependencies = DefaultDependencies()
	}
	if c.Services == nil {
		c.Services = DefaultServices()
	}
	if c.Rate == 0 {
		c.Rate = 25
	}
	if c.Rate < 0 || c.Rate > 1000 {
		return fmt.Errorf("demo: FleetConfig.Rate %v is outside 0..1000", c.Rate)
	}
	if c.Breaker == nil {
		bc := BreakerConfig()
		c.Breaker = &bc
	}
	c.Clock = clock.OrSystem(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Fleet is a running simulated fleet: dependency servers and service
// instances. Close stops it.
type Fleet struct {
	log       *slog.Logger
	servers   []*Server
	instances []*Instance
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// StartFleet starts the dependency servers, then every instance with its
// agent and traffic loop. It returns once everything is started; the
// fleet runs until Close. On error, whatever was started is stopped.
func StartFleet(cfg FleetConfig) (f *Fleet, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f = &Fleet{log: cfg.Logger.With("component", "demo"), cancel: cancel}
	defer func() {
		if err != nil {
			closeCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
			defer done()
			_ = f.Close(closeCtx)
		}
	}()
	urls := map[string]string{}
	noSlow := map[string]bool{}
	for _, d := range cfg.Dependencies {
		noSlow[d.Name] = d.NoSlowCalls
		script := cfg.Script
		if d.Script != nil {
			script = *d.Script
		}
		s, err := StartServer(ServerConfig{Name: d.Name, Script: script, Offset: d.Offset, Clock: cfg.Clock, Logger: f.log})
		if err != nil {
			return f, err
		}
		f.servers = append(f.servers, s)
		urls[d.Name] = s.URL()
	}
	for _, svc := range cfg.Services {
		for i := 1; i <= svc.Instances; i++ {
			inst, err := newInstance(svc, i, urls, noSlow, cfg)
			if err != nil {
				return f, err
			}
			f.instances = append(f.instances, inst)
		}
	}
	for _, inst := range f.instances {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			inst.serve(ctx, cfg.Rate)
		}()
	}
	return f, nil
}

// Servers are the fleet's dependency servers.
func (f *Fleet) Servers() []*Server { return f.servers }

// Instances are the fleet's service instances.
func (f *Fleet) Instances() []*Instance { return f.instances }

// Close stops the traffic, closes every agent (flushing what it can
// before ctx ends), then the dependency servers, in that order. It
// returns the first error.
func (f *Fleet) Close(ctx context.Context) error {
	f.cancel()
	f.wg.Wait()
	var errs []error
	for _, inst := range f.instances {
		if err := inst.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", inst.ID, err))
		}
	}
	for _, s := range f.servers {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("dependency %s: %w", s.Name(), err))
		}
	}
	return errors.Join(errs...)
}
