package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// liveState is an in-memory web.Collector for handler tests: it holds
// dependencies, fans events out to subscribers and records commands in
// the real store, as the collector does. Browser tests use the real
// collector with real agents.
type liveState struct {
	st *store.Store

	mu   sync.Mutex
	deps map[cbdash.DependencyKey]cbdash.Dependency
	subs map[chan cbdash.Event]bool
	n    int
}

func newLiveState(st *store.Store, deps ...cbdash.Dependency) *liveState {
	l := &liveState{st: st, deps: map[cbdash.DependencyKey]cbdash.Dependency{}, subs: map[chan cbdash.Event]bool{}}
	for _, d := range deps {
		l.deps[d.DependencyKey] = d
	}
	return l
}

func (l *liveState) Dependencies() []cbdash.Dependency {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]cbdash.Dependency, 0, len(l.deps))
	for _, d := range l.deps {
		out = append(out, d)
	}
	return out
}

func (l *liveState) Dependency(k cbdash.DependencyKey) (cbdash.Dependency, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.deps[k]
	if !ok {
		return d, fmt.Errorf("dependency %s: %w", k, cbdash.ErrNotFound)
	}
	return d, nil
}

func (l *liveState) Subscribe() ([]cbdash.Dependency, <-chan cbdash.Event, func()) {
	snap := l.Dependencies()
	ch := make(chan cbdash.Event, 64)
	l.mu.Lock()
	l.subs[ch] = true
	l.mu.Unlock()
	return snap, ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.subs[ch] {
			delete(l.subs, ch)
			close(ch)
		}
	}
}

func (l *liveState) publish(ev cbdash.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev.Dependency != nil {
		l.deps[ev.Dependency.DependencyKey] = *ev.Dependency
	}
	for ch := range l.subs {
		select {
		case ch <- ev:
		default:
			delete(l.subs, ch)
			close(ch)
		}
	}
}

func (l *liveState) Issue(ctx context.Context, r cbdash.CommandRequest) (cbdash.Command, error) {
	d, err := l.Dependency(cbdash.DependencyKey{Service: r.Service, Breaker: r.Breaker})
	if err != nil {
		return cbdash.Command{}, err
	}
	l.mu.Lock()
	l.n++
	id := fmt.Sprintf("cmd-%d", l.n)
	l.mu.Unlock()
	now := time.Now()
	cmd := cbdash.Command{ID: id, CommandRequest: r, IssuedAt: now, ExpiresAt: now.Add(r.TTL)}
	if r.TTL == 0 {
		cmd.ExpiresAt = time.Time{}
	}
	for _, in := range d.PerInstance {
		if r.Instance == "" || r.Instance == in.Instance {
			cmd.Targets = append(cmd.Targets, cbdash.CommandTarget{Instance: in.Instance, Status: cbdash.TargetPending})
		}
	}
	if err := l.st.CreateCommand(ctx, cmd); err != nil {
		return cbdash.Command{}, err
	}
	l.publish(cbdash.Event{Kind: cbdash.EventCommand, At: now, Command: &cmd})
	return cmd, nil
}

// dep builds a dependency with n live instances, open on `open` of them.
func dep(service, breaker string, n, open int) cbdash.Dependency {
	d := cbdash.Dependency{
		DependencyKey: cbdash.DependencyKey{Service: service, Breaker: breaker},
		State:         protocol.StateClosed, ByState: map[string]int{}, Instances: n,
		Labels:      map[string]string{"team": "pay"},
		RequestRate: 42.5, FailureRate: 3, P50: 12 * time.Millisecond, P99: 180 * time.Millisecond,
		Headroom: protocol.Headroom{Calls: 100, Failures: 3, FailureRate: 3, FailureRateThreshold: 50, SlowCallRateThreshold: 80},
	}
	for i := range n {
		st := protocol.StateClosed
		if i < open {
			st = protocol.StateOpen
		}
		d.ByState[st]++
		d.PerInstance = append(d.PerInstance, cbdash.InstanceBreaker{
			Service: service, Instance: fmt.Sprintf("%s-%d", service, i+1), Breaker: breaker, State: st,
			LastSeen: time.Now(), Config: protocol.BreakerConfig{Name: breaker, WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000},
			Last: protocol.Window{Millis: 1000, Counts: protocol.Counts{Admitted: 40, Successes: 39, Failures: 1, Errors: 1}},
		})
	}
	if open > 0 {
		d.State = protocol.StateOpen
	}
	return d
}

type harness struct {
	t     *testing.T
	st    *store.Store
	live  *liveState
	srv   *web.Server
	http  *httptest.Server
	users map[string]string // name -> password
}

// newHarness starts a dashboard on a real store with three users: vera
// (viewer), otto (operator) and ada (admin).
func newHarness(t *testing.T, cfg web.Config, deps ...cbdash.Dependency) *harness {
	t.Helper()
	h := start(t, cfg, deps...)
	for _, u := range []struct{ name, role string }{{"vera", cbdash.RoleViewer}, {"otto", cbdash.RoleOperator}, {"ada", cbdash.RoleAdmin}} {
		pw := "password-" + u.name
		hash, err := web.HashPassword(pw)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.st.CreateUser(context.Background(), u.name, u.role, hash); err != nil {
			t.Fatal(err)
		}
		h.users[u.name] = pw
	}
	return h
}

// newHarnessEmpty starts a dashboard with no user.
func newHarnessEmpty(t *testing.T) *harness { return start(t, web.Config{}) }

func start(t *testing.T, cfg web.Config, deps ...cbdash.Dependency) *harness {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cbdash.db"), store.Options{Clock: cfg.Clock})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: st, live: newLiveState(st, deps...), users: map[string]string{}}
	cfg.Collector, cfg.Store = h.live, st
	if cfg.LiveInterval == 0 {
		cfg.LiveInterval = 20 * time.Millisecond
	}
	h.srv, err = web.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = web.HTTPErrorHandler
	h.srv.Mount(e)
	h.http = httptest.NewServer(e)
	t.Cleanup(func() {
		h.srv.Close()
		h.http.Close()
		st.Close()
	})
	return h
}

// nowClock reads its time from now and schedules on the system clock: the
// stopgap that kept these tests' pinned times when web.Config.Now became
// Config.Clock.
type nowClock struct {
	clock.Clock
	now func() time.Time
}

func clockAt(now func() time.Time) clock.Clock { return nowClock{clock.System(), now} }

func (c nowClock) Now() time.Time { return c.now() }

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
	req, _ := http.NewRequest(http.MethodGet, c.h.http.URL+path, nil)
	return c.do(req)
}

// csrf returns the CSRF cookie's token, fetching the login page first
// when the jar has none.
func (c *client) csrf() string {
	u, _ := url.Parse(c.h.http.URL)
	for i := 0; i < 2; i++ {
		for _, ck := range c.hc.Jar.Cookies(u) {
			if ck.Name == "cbdash_csrf" {
				return ck.Value
			}
		}
		c.get("/login")
	}
	c.h.t.Fatal("no CSRF cookie")
	return ""
}

// postForm posts with the CSRF token; rawPost posts exactly what it is given.
func (c *client) postForm(path string, form url.Values) response {
	form.Set("_csrf", c.csrf())
	return c.rawPost(path, form)
}

func (c *client) rawPost(path string, form url.Values) response {
	req, _ := http.NewRequest(http.MethodPost, c.h.http.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}
