package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
	"golang.org/x/crypto/bcrypt"
)

// harness is a real cbdash server on loopback (stacktest: a store on
// SQLite in a temp dir, the collector with its Run loop, the dashboard,
// wired as cmd/cbdash wires them, on one clock) with accounts. Tests give
// it live state as agents do: through the collector's HTTP ingest (POST
// /api/v1/ingest), or with real agents (startStack).
type harness struct {
	t     *testing.T
	clock clock.Clock
	stack *stacktest.Stack
	opts  stacktest.Options // what stack was started with
	st    *store.Store
	col   *collector.Collector
	srv   *web.Server
	url   string            // the server's base URL
	cfg   web.Config        // the dashboard's config
	users map[string]string // name -> password

	mu       sync.Mutex
	reported map[string]reported // service/instance -> what was last ingested
}

// reported is what the harness last ingested for one instance.
type reported struct {
	seq      uint64
	breakers []string          // declared in its hello, in order
	states   map[string]string // breaker -> state
}

// fleet is a dependency as a harness reports it: instances
// <service>-1..<service>-n, the first `open` of them open, each with
// `calls` calls in the second before the report (see reportCalls).
type fleet struct {
	service, breaker string
	n, open          int
	calls            int64
}

func dep(service, breaker string, n, open int) fleet { return fleet{service, breaker, n, open, 40} }

// quiet is f without calls: nothing on its tile (rates, latencies) moves
// as the clock does.
func quiet(f fleet) fleet {
	f.calls = 0
	return f
}

// newHarness starts a dashboard on a virtual clock at the test epoch with
// three users, vera (viewer), otto (operator) and ada (admin), and
// reports each fleet through the ingest API.
func newHarness(t *testing.T, cfg web.Config, deps ...fleet) *harness {
	t.Helper()
	var clk clock.Clock = clocktest.Virtual()
	if cfg.Clock != nil { // the test moves a clock of its own
		clk = cfg.Clock
	}
	h := start(t, cfg, clk)
	for _, u := range []struct{ name, role string }{{"vera", cbdash.RoleViewer}, {"otto", cbdash.RoleOperator}, {"ada", cbdash.RoleAdmin}} {
		h.addUser(u.name, u.role, "password-"+u.name)
	}
	for _, f := range deps {
		h.fleet(f)
	}
	return h
}

// newHarnessEmpty starts a dashboard with no user.
func newHarnessEmpty(t *testing.T) *harness { return start(t, web.Config{}, clocktest.Virtual()) }

// start runs a stack on clk until the test ends, its dashboard configured
// by cfg (whose services and Clock the stack sets; LiveInterval
// 0 = 20 ms, PasswordCost 0 = bcrypt's lowest). The collector publishes every 20 ms of clk.
func start(t *testing.T, cfg web.Config, clk clock.Clock) *harness {
	t.Helper()
	h := &harness{t: t, clock: clk, users: map[string]string{}, reported: map[string]reported{}}
	h.run(stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.PublishInterval = 20 * time.Millisecond },
		Alert:     func(a *alert.Config) { a.Delivery.AllowPrivate = true }, // test webhooks listen on loopback
		Web: func(w *web.Config) {
			c := wired(cfg, *w)
			if c.LiveInterval == 0 {
				c.LiveInterval = 20 * time.Millisecond
			}
			if c.PasswordCost == 0 {
				c.PasswordCost = bcrypt.MinCost // as addUser's hashes
			}
			*w, h.cfg = c, c
		}})
	return h
}

// wired is cfg with the services and the clock of w, the stack's config.
func wired(cfg, w web.Config) web.Config {
	cfg.Collector, cfg.History, cfg.Sessions, cfg.Accounts, cfg.Clock = w.Collector, w.History, w.Sessions, w.Accounts, w.Clock
	cfg.Holds, cfg.Incidents, cfg.InstanceHistory, cfg.FleetHistory = w.Holds, w.Incidents, w.InstanceHistory, w.FleetHistory
	cfg.AgentSessions, cfg.Alerts, cfg.Schedules, cfg.ShadowHistory = w.AgentSessions, w.Alerts, w.Schedules, w.ShadowHistory
	return cfg
}

func (h *harness) run(o stacktest.Options) {
	h.t.Helper()
	h.opts = o
	h.stack = stacktest.Start(h.t, o)
	h.st, h.col, h.srv, h.url = h.stack.Store, h.stack.Collector, h.stack.Web, h.stack.URL()
}

// restart stops the stack and starts it again on the same database and
// address, as a process restart would: live sockets end with 1012,
// agents reconnect.
func (h *harness) restart() {
	h.t.Helper()
	o := h.opts
	o.Path, o.Addr = h.stack.Path, h.stack.Addr
	h.stack.Stop()
	h.run(o)
}

// addUser creates an account whose password hash has bcrypt's lowest
// cost (4): the server checks a password at the cost of the stored hash,
// and at the cost web.HashPassword uses (10) a hash took 2.5 s and a
// check 1.6 s under the race detector on a busy 2-core machine (cost 4:
// 21 ms and 89 ms), for three accounts per harness and every login.
// The harness's server hashes at that cost too (web.Config.PasswordCost:
// accounts added on the admin page, and the stand-in an unknown name is
// checked against); EnsureAdmin keeps HashPassword's.
func (h *harness) addUser(name, role, password string) {
	h.t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.st.CreateUser(context.Background(), name, role, hash); err != nil {
		h.t.Fatal(err)
	}
	h.users[name] = password
}

// virtual is the harness's clock, which newHarness makes virtual.
func (h *harness) virtual() *breakertest.Clock {
	h.t.Helper()
	c, ok := h.clock.(*breakertest.Clock)
	if !ok {
		h.t.Fatalf("the harness clock is a %T, not virtual", h.clock)
	}
	return c
}

// tick moves a virtual harness clock on by the live interval (20 ms
// unless the test set one), the collector's publish interval: one tick
// of each. Tests that wait for something the clock drives call it while
// they wait; on a running clock it does nothing.
func (h *harness) tick() {
	if v, ok := h.clock.(*breakertest.Clock); ok {
		v.Advance(h.cfg.LiveInterval)
	}
}

// breakerConfig is the configuration every harness breaker reports.
func breakerConfig(name string) protocol.BreakerConfig {
	return protocol.BreakerConfig{Name: name, WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50,
		SlowCallDurationMillis: 250, SlowCallRateThreshold: 80, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1}
}

// hello declares instance of service with one breaker per name, labelled
// team=pay, started an hour before the test epoch.
func hello(service, instance string, breakers []string) protocol.Hello {
	h := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: service, Instance: instance,
		SDKVersion: "test", Labels: map[string]string{"team": "pay"}, StartedAt: clocktest.Epoch().Add(-time.Hour).UnixMilli()}
	for _, b := range breakers {
		h.Breakers = append(h.Breakers, breakerConfig(b))
	}
	return h
}

// fleet reports every instance of f once (see report).
func (h *harness) fleet(f fleet) {
	h.t.Helper()
	for i := range f.n {
		state := protocol.StateClosed
		if i < f.open {
			state = protocol.StateOpen
		}
		h.reportCalls(f.service, f.breaker, fmt.Sprintf("%s-%d", f.service, i+1), state, f.calls)
	}
}

// report is reportCalls with 40 calls.
func (h *harness) report(service, breaker, instance, state string) protocol.IngestResponse {
	h.t.Helper()
	return h.reportCalls(service, breaker, instance, state, 40)
}

// reportCalls ingests one batch for instance: the second that ends now,
// in which its breaker ended in state, with a sliding window of 100 calls
// of which 3 failed and 10 were slow. calls must be 0 or a multiple of 40:
// per 40 calls, 39 succeeded and 1 failed; 30 took 10-25 ms, 10 took
// 250-500 ms (slow). When the state differs from the one last reported
// (closed at first), the batch carries the transition, half a second ago:
// into open, a trip (failure rate 55% of 50%).
func (h *harness) reportCalls(service, breaker, instance, state string, calls int64) protocol.IngestResponse {
	h.t.Helper()
	if calls%40 != 0 {
		h.t.Fatalf("reportCalls: %d calls is not a multiple of 40", calls)
	}
	now := h.clock.Now()
	w := protocol.Window{Breaker: breaker, Start: now.Add(-time.Second).UnixMilli(), Millis: 1000, State: state,
		Headroom: protocol.Headroom{Calls: 100, Failures: 3, FailureRate: 3, FailureRateThreshold: 50, Slow: 10,
			SlowCallRate: 10, SlowCallRateThreshold: 80, MinimumCalls: 10}}
	if n := calls / 40; n > 0 {
		w.Counts = protocol.Counts{Admitted: 40 * n, Successes: 39 * n, Failures: n, Errors: n, Slow: 10 * n}
		w.Latency = make([]int64, protocol.NumLatencyBuckets)
		w.Latency[4], w.Latency[8] = 30*n, 10*n
		w.LatencySumMs = float64(n * (30*20 + 10*400))
	}
	b := protocol.Batch{Windows: []protocol.Window{w}}
	if from := h.stateOf(service, instance, breaker); from != state {
		tr := protocol.Transition{Breaker: breaker, From: from, To: state, At: now.Add(-500 * time.Millisecond).UnixMilli()}
		if state == protocol.StateOpen {
			tr.OpenMillis = 5000
			tr.Cause = protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, Threshold: 50, WindowCalls: 20, WindowFailed: 11}
		}
		b.Transitions = append(b.Transitions, tr)
	}
	return h.ingest(service, instance, b)
}

func (h *harness) stateOf(service, instance, breaker string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.reported[service+"/"+instance].states[breaker]; ok {
		return s
	}
	return protocol.StateClosed
}

// ingest posts b (numbered after the instance's last batch, sent now)
// with a hello declaring every breaker the instance has reported (b's
// included) to POST /api/v1/ingest with the agent token, as an agent
// without a websocket does, and returns the collector's answer. The
// batch's transitions and windows become the instance's known states.
func (h *harness) ingest(service, instance string, b protocol.Batch) protocol.IngestResponse {
	h.t.Helper()
	out, err := h.tryIngest(service, instance, b)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// tryIngest is ingest for any goroutine: it returns the error ingest fails
// the test with. Batches of one instance must be sent from one goroutine
// (their numbers are taken in the order of the calls).
func (h *harness) tryIngest(service, instance string, b protocol.Batch) (protocol.IngestResponse, error) {
	key := service + "/" + instance
	h.mu.Lock()
	r := h.reported[key]
	r.states = maps.Clone(r.states)
	if r.states == nil {
		r.states = map[string]string{}
	}
	r.breakers = slices.Clone(r.breakers)
	declare := func(name string) {
		if !slices.Contains(r.breakers, name) {
			r.breakers = append(r.breakers, name)
		}
	}
	for _, tr := range b.Transitions {
		declare(tr.Breaker)
		r.states[tr.Breaker] = tr.To
	}
	for _, w := range b.Windows {
		declare(w.Breaker)
		r.states[w.Breaker] = w.State
	}
	r.seq++
	h.reported[key] = r
	h.mu.Unlock()
	b.Type, b.Seq, b.SentAt = protocol.TypeBatch, r.seq, h.clock.Now().UnixMilli()
	body, err := json.Marshal(protocol.IngestRequest{Hello: hello(service, instance, r.breakers), Batch: b})
	if err != nil {
		return protocol.IngestResponse{}, err
	}
	req, _ := http.NewRequest(http.MethodPost, h.url+"/api/v1/ingest", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.stack.AgentToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return protocol.IngestResponse{}, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return protocol.IngestResponse{}, fmt.Errorf("ingest %s seq %d: %d %s", key, b.Seq, res.StatusCode, raw)
	}
	var out protocol.IngestResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return protocol.IngestResponse{}, fmt.Errorf("ingest answer %s: %v", raw, err)
	}
	return out, nil
}

// client is a browser-like HTTP client: cookie jar, no redirects followed.
type client struct {
	h  *harness
	hc *http.Client
}

func (h *harness) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{h: h, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// login logs in as user (a name of newHarness) and returns the client.
func (h *harness) login(user string) *client {
	h.t.Helper()
	c := h.client()
	res := c.postForm("/login", url.Values{"user": {user}, "password": {h.users[user]}, "next": {"/"}})
	if res.status != http.StatusSeeOther {
		h.t.Fatalf("login %s: %d %s", user, res.status, res.body)
	}
	return c
}

type response struct {
	status int
	header http.Header
	body   string
}

func (c *client) do(req *http.Request) response {
	c.h.t.Helper()
	res, err := c.hc.Do(req)
	if err != nil {
		c.h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: string(b)}
}

func (c *client) get(path string) response {
	req, _ := http.NewRequest(http.MethodGet, c.h.url+path, nil)
	return c.do(req)
}

// csrf returns the CSRF token a page gives this client, as a browser's
// form would carry it: bound to the session once logged in, the
// cbdash_csrf cookie's before.
func (c *client) csrf() string {
	for _, path := range []string{"/", "/login"} {
		if m := csrfInput.FindStringSubmatch(c.get(path).body); m != nil {
			return html.UnescapeString(m[1])
		}
	}
	c.h.t.Fatal("no page gives a CSRF token")
	return ""
}

var csrfInput = regexp.MustCompile(`name="_csrf" value="([^"]*)"`)

// postForm posts with the CSRF token; rawPost posts exactly what it is given.
func (c *client) postForm(path string, form url.Values) response {
	form.Set("_csrf", c.csrf())
	return c.rawPost(path, form)
}

func (c *client) rawPost(path string, form url.Values) response {
	req, _ := http.NewRequest(http.MethodPost, c.h.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}
