// Package loadgen simulates a fleet of cbdash agents against a collector,
// over real websockets, speaking the wire protocol directly (no breakers):
// every instance says hello with its breakers, sends a window report per
// breaker every Interval, and now and then pushes a transition at once, as
// a real agent does. It measures the window reports the collector
// acknowledged per second (acks come after the commit) and how long a
// transition takes from leaving its agent to reaching a subscriber of
// GET /api/v1/events.
//
// It backs `cbdash loadgen`; Run is safe to call from one goroutine at a
// time per Config (each call owns its connections).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// ErrInvalid is wrapped by Config validation errors.
var ErrInvalid = errors.New("invalid load generator config")

// Config says what fleet to simulate. The zero value of every field but
// URL and Token works.
type Config struct {
	// URL is the collector's base URL (http:// or https://); required.
	// Transitions are timed to a subscriber of its /api/v1/events.
	URL string
	// AgentURLs are the base URLs of several collectors sharing one
	// database: simulated instance i connects to AgentURLs[i mod n].
	// Empty = URL alone.
	AgentURLs []string
	// Token is an agent token (cbdash token create); required.
	Token string
	// ReadToken, when set, is sent as a Bearer token to /api/v1/events (a
	// user API token, when the dashboard requires a login).
	ReadToken string
	// Service names the simulated service; "" = "loadgen".
	Service string
	// Instances is the number of simulated agents; 0 = 1000.
	Instances int
	// BreakersPerInstance is the number of breakers per agent; 0 = 20.
	BreakersPerInstance int
	// Interval is the window report period; 0 = 1 s.
	Interval time.Duration
	// Duration is how long to measure once every instance is connected;
	// 0 = 30 s.
	Duration time.Duration
	// TransitionEvery is how often, on average, each instance flips one
	// of its breakers (closed > open or back), pushed at once in its own
	// batch; 0 = 10 s.
	TransitionEvery time.Duration
	// DialConcurrency bounds concurrent websocket dials; 0 = 50.
	DialConcurrency int
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
	// MetricsToken, when set, is sent as a Bearer token to /metrics
	// (serve --metrics-token), which the run scrapes for the server's own
	// process CPU and resident memory.
	MetricsToken string
	// DBSize, when set, returns the server database's size in bytes (its
	// pages in use) under "total", and, where it can tell, the bytes of
	// parts of it: "seconds" (the per-second history level),
	// "instance_minutes" (per-instance minutes), "transitions" (with their
	// indexes). The run reads it at the start and the end of the
	// measurement for Result's DB figures. nil = not measured.
	DBSize func(ctx context.Context) (map[string]int64, error)
	// Clock stamps what the simulated agents send (their start, window
	// reports, transitions), as a real agent's clock does; nil =
	// clock.System(). Pacing, timeouts and the latencies measured are
	// real time.
	Clock clock.Clock
}

func (c *Config) setDefaults() {
	if c.Service == "" {
		c.Service = "loadgen"
	}
	c.Clock = clock.OrSystem(c.Clock)
	if c.Instances == 0 {
		c.Instances = 1000
	}
	if c.BreakersPerInstance == 0 {
		c.BreakersPerInstance = 20
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.TransitionEvery == 0 {
		c.TransitionEvery = 10 * time.Second
	}
	if c.DialConcurrency == 0 {
		c.DialConcurrency = 50
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	bad := func(field, why string) error { return fmt.Errorf("%w: %s %s", ErrInvalid, field, why) }
	switch {
	case !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://"):
		return bad("URL", "must start with http:// or https://")
	case c.Token == "":
		return bad("Token", "is required")
	case slices.ContainsFunc(c.AgentURLs, func(u string) bool {
		return !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://")
	}):
		return bad("AgentURLs", "must each start with http:// or https://")
	case c.Instances < 0:
		return bad("Instances", "is negative")
	case c.BreakersPerInstance < 0 || c.BreakersPerInstance > protocol.MaxBreakersPerHello:
		return bad("BreakersPerInstance", fmt.Sprintf("must be within 0..%d", protocol.MaxBreakersPerHello))
	case c.Interval < 0, c.Duration < 0, c.TransitionEvery < 0:
		return bad("Interval/Duration/TransitionEvery", "is negative")
	case c.DialConcurrency < 0:
		return bad("DialConcurrency", "is negative")
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	Instances int           `json:"instances"` // connected instances
	Breakers  int           `json:"breakers"`  // per instance
	Measured  time.Duration `json:"measured"`  // length of the measurement
	Connect   time.Duration `json:"connect"`   // time to connect every instance
	Windows   int64         `json:"windows"`   // window reports acknowledged while measuring
	Rate      float64       `json:"rate"`      // acknowledged window reports per second
	Offered   float64       `json:"offered"`   // window reports per second sent while measuring
	Refused   int64         `json:"refused"`   // batches refused by the collector
	Sent      int64         `json:"sent"`      // transitions sent while measuring
	Seen      int64         `json:"seen"`      // of them, seen by the subscriber
	P50       time.Duration `json:"p50"`       // transition to subscriber
	P99       time.Duration `json:"p99"`       // transition to subscriber
	Max       time.Duration `json:"max"`       // transition to subscriber
	Errors    int64         `json:"errors"`    // connections lost or refused
	// The latency split at the moment the collector read the transition's
	// frame (its received_at): Inbound is agent to collector (socket,
	// and the wait for the collector's reader to be scheduled), Fanout is
	// the collector's decode, validation, live update and publication, and
	// the event stream to the subscriber.
	InboundP50 time.Duration `json:"inbound_p50"`
	InboundP99 time.Duration `json:"inbound_p99"`
	FanoutP50  time.Duration `json:"fanout_p50"`
	FanoutP99  time.Duration `json:"fanout_p99"`
	// SubscriberDrops counts how often the collector dropped the event
	// stream for falling behind (it is reopened at once; transitions sent
	// meanwhile are missed, so Seen < Sent).
	SubscriberDrops int64 `json:"subscriber_drops"`

	// From the server's own /metrics, scraped when the measurement starts
	// and ends (and every few seconds for the peak): its process CPU over
	// the measurement (ServerCPU, in cores), that CPU per acked window
	// report, and its resident memory. Zero when /metrics had no process
	// metrics. With several collectors (Collectors), ServerCPU and
	// CPUPerReport are theirs together: the cores of all, and their CPU
	// per report any of them acked (each one's in Collectors); RSS is
	// Config.URL's.
	ServerCPU    float64       `json:"server_cpu_cores"`
	CPUPerReport time.Duration `json:"cpu_per_report"`
	RSS          int64         `json:"rss_bytes"`      // at the end
	PeakRSS      int64         `json:"peak_rss_bytes"` // highest seen while measuring
	DecodeFloor  time.Duration `json:"decode_floor"`   // CPU to decode one window report, measured in loadgen
	FloorRatio   float64       `json:"floor_ratio"`    // CPUPerReport / DecodeFloor
	Dependencies int           `json:"dependencies"`   // BreakersPerInstance: one service
	// The store writer over the measurement, from the same scrapes: group
	// transactions committed a second and writes (batches, hellos,
	// commands...) per transaction. Zero when /metrics had no store
	// counters.
	StoreTxPerSec  float64 `json:"store_transactions_per_second"`
	WritesPerTx    float64 `json:"store_writes_per_transaction"`
	DBGrowth       int64   `json:"db_growth_bytes"`
	DBBytesPerDepS float64 `json:"db_bytes_per_dependency_second"` // DBGrowth / (Dependencies x Measured); 0 without Config.DBSize
	// Of that growth, per dependency-second: the per-second history level,
	// the per-instance minutes and the transitions (Config.DBSize's parts).
	SecondsPerDepS         float64 `json:"seconds_level_bytes_per_dependency_second"`
	InstanceMinutesPerDepS float64 `json:"instance_minutes_bytes_per_dependency_second"`
	TransitionsPerDepS     float64 `json:"transitions_bytes_per_dependency_second"`

	// The machine during the measurement: its CPUs (runtime.NumCPU), its
	// 1-minute load average when the measurement started and ended (-1
	// where the system does not tell), and the CPU loadgen itself used
	// (cores; 0 where the system does not tell), which shares the
	// machine with the server when both run on it.
	// Collectors has one entry per collector of Config.AgentURLs when
	// there are several (nil otherwise): what each acked and the CPU its
	// process spent, from its own /metrics (Config.MetricsToken).
	Collectors []CollectorResult `json:"collectors,omitempty"`

	CPUs       int     `json:"cpus"`
	LoadStart  float64 `json:"load_average_start"`
	LoadEnd    float64 `json:"load_average_end"`
	LoadgenCPU float64 `json:"loadgen_cpu_cores"`
}

// String formats r as one line per measure.
func (r Result) String() string {
	s := r.summary()
	for i, c := range r.Collectors {
		s += fmt.Sprintf("\ncollector %d (%s): %.0f acked window reports/s, %.2f cores, %.1f µs per acked report, RSS %.0f MB",
			i+1, c.URL, float64(c.Windows)/r.Measured.Seconds(), c.CPU, float64(c.CPUPerReport)/float64(time.Microsecond), float64(c.RSS)/1e6)
	}
	return s
}

func (r Result) summary() string {
	cpu := "server CPU"
	if len(r.Collectors) > 1 {
		cpu = fmt.Sprintf("CPU of the %d collectors together", len(r.Collectors))
	}
	return fmt.Sprintf("instances %d x breakers %d, connected in %v\n"+
		"%s: %.2f cores, %.1f µs per acked window report (decode floor %.2f µs, ratio %.1f); RSS %.0f MB (peak %.0f MB)\n"+
		"store: %.1f transactions/s, %.1f writes per transaction\n"+
		"database: %d bytes grown, %.0f bytes per dependency-second (%d dependencies): per-second level %.0f, instance minutes %.0f, transitions %.0f\n"+
		"acked window reports: %.0f/s (offered %.0f/s) over %v, %d refused batches, %d connection errors\n"+
		"transition to subscriber: p50 %v p99 %v max %v (%d of %d seen, event stream dropped %d times)\n"+
		"  agent to collector p50 %v p99 %v; collector to subscriber p50 %v p99 %v\n"+
		"machine: %d CPUs, load average %s at the start and %s at the end; loadgen itself %.2f cores",
		r.Instances, r.Breakers, r.Connect.Round(time.Millisecond),
		cpu, r.ServerCPU, float64(r.CPUPerReport)/float64(time.Microsecond), float64(r.DecodeFloor)/float64(time.Microsecond), r.FloorRatio,
		float64(r.RSS)/1e6, float64(r.PeakRSS)/1e6,
		r.StoreTxPerSec, r.WritesPerTx,
		r.DBGrowth, r.DBBytesPerDepS, r.Dependencies, r.SecondsPerDepS, r.InstanceMinutesPerDepS, r.TransitionsPerDepS,
		r.Rate, r.Offered, r.Measured.Round(time.Millisecond), r.Refused, r.Errors,
		r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Max.Round(10*time.Microsecond), r.Seen, r.Sent, r.SubscriberDrops,
		r.InboundP50.Round(10*time.Microsecond), r.InboundP99.Round(10*time.Microsecond), r.FanoutP50.Round(10*time.Microsecond), r.FanoutP99.Round(10*time.Microsecond),
		r.CPUs, loadText(r.LoadStart), loadText(r.LoadEnd), r.LoadgenCPU)
}

// run is the shared state of one Run.
type run struct {
	cfg       Config
	measuring atomic.Bool
	windows   atomic.Int64   // acked while measuring
	perServer []atomic.Int64 // of windows, per collector (Config.AgentURLs, or the one server)
	offered   atomic.Int64   // sent while measuring
	refused   atomic.Int64
	errors    atomic.Int64
	sent      atomic.Int64
	subDrops  atomic.Int64

	mu        sync.Mutex
	pending   map[string]time.Time // "instance/breaker/generation" -> sent
	latencies []time.Duration      // sent -> subscriber
	inbound   []time.Duration      // sent -> read by the collector (received_at)
	fanout    []time.Duration      // read by the collector -> subscriber
}

// Run connects cfg.Instances simulated agents, waits until all are
// connected (or failed), measures for cfg.Duration, then closes everything
// and returns what it measured. It returns early with ctx's error when ctx
// ends, ErrInvalid for a bad Config, or an error when the event stream or
// every connection fails.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, pending: make(map[string]time.Time), perServer: make([]atomic.Int64, max(1, len(cfg.AgentURLs)))}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	sub, err := r.subscribe(ctx)
	if err != nil {
		return Result{}, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.follow(ctx, sub)
	}()

	start := time.Now()
	connected := make(chan *agent, cfg.Instances)
	sem := make(chan struct{}, cfg.DialConcurrency)
	var dials sync.WaitGroup
	for i := range cfg.Instances {
		dials.Add(1)
		sem <- struct{}{}
		go func() {
			defer dials.Done()
			defer func() { <-sem }()
			a, err := r.dial(ctx, i)
			if err != nil {
				r.errors.Add(1)
				cfg.Logger.Warn("dial", "instance", i, "err", err)
				return
			}
			connected <- a
		}()
	}
	dials.Wait()
	close(connected)
	var agents []*agent
	for a := range connected {
		agents = append(agents, a)
	}
	res := Result{Instances: len(agents), Breakers: cfg.BreakersPerInstance, Connect: time.Since(start)}
	if len(agents) == 0 {
		return res, errors.New("loadgen: no instance could connect")
	}
	cfg.Logger.Info("connected", "instances", len(agents), "in", res.Connect)
	for _, a := range agents {
		wg.Add(2)
		go func() { defer wg.Done(); a.readLoop(ctx) }()
		go func() { defer wg.Done(); a.sendLoop(ctx) }()
	}
	// Let every instance send once before measuring.
	warm := time.NewTimer(cfg.Interval + 500*time.Millisecond)
	select {
	case <-ctx.Done():
		warm.Stop()
		return res, ctx.Err()
	case <-warm.C:
	}
	first := r.scrape(ctx, true)
	firstEach := r.scrapeEach(ctx)
	r.measuring.Store(true)
	t0 := time.Now()
	res.CPUs, res.LoadStart = runtime.NumCPU(), loadAverage()
	ownCPU := cpuTime()
	end := time.NewTimer(cfg.Duration)
	peek := time.NewTicker(5 * time.Second)
	defer peek.Stop()
	var peak float64
wait:
	for {
		select {
		case <-ctx.Done():
			end.Stop()
			return res, ctx.Err()
		case <-peek.C:
			if s := r.scrape(ctx, false); s.valid {
				peak = max(peak, s.rss)
			}
		case <-end.C:
			break wait
		}
	}
	r.measuring.Store(false)
	res.Measured = time.Since(t0)
	res.LoadEnd = loadAverage()
	res.LoadgenCPU = (cpuTime() - ownCPU).Seconds() / res.Measured.Seconds()
	last := r.scrape(ctx, true)
	lastEach := r.scrapeEach(ctx)
	// Give transitions sent at the very end a moment to arrive.
	grace := time.NewTimer(time.Second)
	select {
	case <-grace.C:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	for _, a := range agents {
		a.conn.CloseNow()
	}
	res.Windows = r.windows.Load()
	res.Rate = float64(res.Windows) / res.Measured.Seconds()
	res.Offered = float64(r.offered.Load()) / res.Measured.Seconds()
	res.Refused = r.refused.Load()
	res.Errors = r.errors.Load()
	res.Sent = r.sent.Load()
	res.SubscriberDrops = r.subDrops.Load()
	r.mu.Lock()
	lat, in, out := slices.Clone(r.latencies), slices.Clone(r.inbound), slices.Clone(r.fanout)
	r.mu.Unlock()
	res.Seen = int64(len(lat))
	res.P50, res.P99, res.Max = percentiles(lat)
	res.InboundP50, res.InboundP99, _ = percentiles(in)
	res.FanoutP50, res.FanoutP99, _ = percentiles(out)
	res.Dependencies = cfg.BreakersPerInstance
	if first.valid && last.valid {
		cpu := last.cpu - first.cpu
		res.ServerCPU = cpu / last.at.Sub(first.at).Seconds()
		if res.Windows > 0 {
			// Over the scrapes' span, the reports acked in it (the
			// measurement's rate).
			res.CPUPerReport = time.Duration(cpu / (res.Rate * last.at.Sub(first.at).Seconds()) * float64(time.Second))
		}
		res.RSS, res.PeakRSS = int64(last.rss), int64(max(peak, last.rss, first.rss))
	}
	if first.storeValid && last.storeValid {
		tx := last.storeTx - first.storeTx
		res.StoreTxPerSec = tx / last.at.Sub(first.at).Seconds()
		if tx > 0 {
			res.WritesPerTx = (last.storeOps - first.storeOps) / tx
		}
	}
	if first.db != nil && last.db != nil && res.Dependencies > 0 {
		depS := float64(res.Dependencies) * last.at.Sub(first.at).Seconds()
		per := func(part string) float64 { return float64(last.db[part]-first.db[part]) / depS }
		res.DBGrowth = last.db["total"] - first.db["total"]
		res.DBBytesPerDepS = per("total")
		res.SecondsPerDepS, res.InstanceMinutesPerDepS, res.TransitionsPerDepS = per("seconds"), per("instance_minutes"), per("transitions")
	}
	res.Collectors = r.collectors(firstEach, lastEach)
	if cores, per, ok := together(res.Collectors); ok {
		res.ServerCPU, res.CPUPerReport = cores, per
	}
	res.DecodeFloor = decodeFloor(cfg.BreakersPerInstance)
	if res.DecodeFloor > 0 && res.CPUPerReport > 0 {
		res.FloorRatio = float64(res.CPUPerReport) / float64(res.DecodeFloor)
	}
	return res, nil
}

// subscribe opens the event stream (transitions only).
func (r *run) subscribe(ctx context.Context) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(r.cfg.URL, "/")+"/api/v1/events?kind=transition", nil)
	if err != nil {
		return nil, err
	}
	if r.cfg.ReadToken != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.ReadToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("loadgen: event stream: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("loadgen: event stream: %s", resp.Status)
	}
	return resp, nil
}

// sentAt records when a transition left its agent.
func (r *run) sentAt(key string, at time.Time) {
	if !r.measuring.Load() {
		return
	}
	r.sent.Add(1)
	r.mu.Lock()
	r.pending[key] = at
	r.mu.Unlock()
}

// seen records a transition's arrival at the subscriber, and when the
// collector read it (same machine, same clock).
func (r *run) seen(key string, received, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.pending[key]; ok {
		delete(r.pending, key)
		r.latencies = append(r.latencies, at.Sub(t))
		if !received.IsZero() {
			r.inbound = append(r.inbound, received.Sub(t))
			r.fanout = append(r.fanout, at.Sub(received))
		}
	}
}

// percentiles returns the p50, p99 and max of ds (which it sorts).
func percentiles(ds []time.Duration) (p50, p99, most time.Duration) {
	slices.Sort(ds)
	if n := len(ds); n > 0 {
		return ds[n*50/100], ds[min(n-1, n*99/100)], ds[n-1]
	}
	return 0, 0, 0
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(d) + 1))
}

func wsURL(base string) string {
	base = strings.TrimRight(base, "/")
	if strings.HasPrefix(base, "https://") {
		return "wss://" + strings.TrimPrefix(base, "https://") + "/api/v1/agent"
	}
	return "ws://" + strings.TrimPrefix(base, "http://") + "/api/v1/agent"
}

func (r *run) dial(ctx context.Context, i int) (*agent, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	base := r.cfg.URL
	if n := len(r.cfg.AgentURLs); n > 0 {
		base = r.cfg.AgentURLs[i%n]
	}
	conn, _, err := websocket.Dial(dctx, wsURL(base), &websocket.DialOptions{
		Subprotocols: []string{protocol.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + r.cfg.Token}},
	})
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(protocol.MaxMessageBytes)
	a := newAgent(r, conn, fmt.Sprintf("load-%04d", i))
	if n := len(r.cfg.AgentURLs); n > 0 {
		a.server = i % n
	}
	if err := a.handshake(dctx); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return a, nil
}
