package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// dial opens the live socket of a page as the client's user.
func (c *client) dial(ctx context.Context, query string, origin string) (*websocket.Conn, *http.Response, error) {
	u, _ := url.Parse(c.h.http.URL)
	hdr := http.Header{}
	for _, ck := range c.hc.Jar.Cookies(u) {
		hdr.Add("Cookie", ck.Name+"="+ck.Value)
	}
	if origin != "" {
		hdr.Set("Origin", origin)
	}
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.h.http.URL, "http")+"/live?"+query, &websocket.DialOptions{HTTPHeader: hdr})
}

// readUntil reads messages until one contains want, or the deadline.
func readUntil(t *testing.T, ctx context.Context, conn *websocket.Conn, want string) string {
	t.Helper()
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		if strings.Contains(string(msg), want) {
			return string(msg)
		}
	}
}

// readAll reads messages until one contains want, or the deadline, and
// returns every message read.
func readAll(t *testing.T, ctx context.Context, conn *websocket.Conn, want string) []string {
	t.Helper()
	var msgs []string
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		msgs = append(msgs, string(msg))
		if strings.Contains(string(msg), want) {
			return msgs
		}
	}
}

// published waits until the collector publishes an event of dependency k
// on events.
func published(t *testing.T, ctx context.Context, events <-chan cbdash.Event, k cbdash.DependencyKey) {
	t.Helper()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the collector dropped the subscription")
			}
			if ev.Kind == cbdash.EventDependency && ev.Dependency.DependencyKey == k {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no event of %s: %v", k, ctx.Err())
		}
	}
}

func TestLiveOverviewPushesChangedTiles(t *testing.T) {
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 6, 0), dep("checkout", "stock", 2, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := h.login("vera").dial(ctx, "view=overview", "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	first := readUntil(t, ctx, conn, `id="groups-inner"`)
	if !strings.Contains(first, `id="fleet"`) || !strings.Contains(first, "closed on 6 of 6") {
		t.Fatalf("first message is not the full overview: %s", first)
	}

	h.report("checkout", "payments", "checkout-1", protocol.StateOpen)
	h.report("checkout", "payments", "checkout-2", protocol.StateOpen)
	msg := readUntil(t, ctx, conn, "open on 2 of 6")
	if !strings.Contains(msg, `data-state="open"`) || !strings.Contains(msg, `id="fleet"`) {
		t.Errorf("update lacks the open tile or the counters: %.400s", msg)
	}
	if strings.Contains(msg, "stock") {
		t.Error("an unchanged tile was sent again")
	}

	// A report that changes nothing visible (a second without calls)
	// publishes payments again, but sends no tile.
	_, events, unsubscribe := h.col.Subscribe()
	defer unsubscribe()
	idle := protocol.Window{Breaker: "payments", Start: h.clock.Now().Add(-time.Second).UnixMilli(), Millis: 1000, State: protocol.StateOpen,
		Headroom: protocol.Headroom{Calls: 100, Failures: 3, FailureRate: 3, FailureRateThreshold: 50, Slow: 10,
			SlowCallRate: 10, SlowCallRateThreshold: 80, MinimumCalls: 10}}
	h.ingest("checkout", "checkout-1", protocol.Batch{Windows: []protocol.Window{idle}})
	published(t, ctx, events, cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
	h.report("checkout", "stock", "checkout-1", protocol.StateOpen)
	for _, msg := range readAll(t, ctx, conn, "open on 1 of 2") {
		if strings.Contains(msg, "open on 2 of 6") {
			t.Errorf("the unchanged payments tile was sent again: %.400s", msg)
		}
	}

	// A new dependency re-sends the grid.
	h.fleet(dep("search", "index", 1, 0))
	readUntil(t, ctx, conn, `id="groups-inner"`)
}

func TestLiveRefusesForeignOriginsAndStrangers(t *testing.T) {
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 1, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, res, err := h.login("vera").dial(ctx, "view=overview", "http://evil.example")
	if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: err %v, response %v; want 403", err, res)
	}
	_, res, err = h.client().dial(ctx, "view=overview", "")
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("not logged in: err %v, response %v; want 401", err, res)
	}
	_, res, err = h.login("vera").dial(ctx, "view=dependency&service=x&breaker=y", "")
	if err == nil || res == nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown dependency: err %v, response %v; want 404", err, res)
	}
}

func TestLiveDependencyShowsCommandResults(t *testing.T) {
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := h.login("vera").dial(ctx, "view=dependency&service=checkout&breaker=payments", "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	readUntil(t, ctx, conn, `id="dep-commands"`)
	cmd, err := h.col.Issue(ctx, cbdash.CommandRequest{Service: "checkout", Breaker: "payments", Action: protocol.ActionForceOpen,
		TTL: 15 * time.Minute, Reason: "drill", Actor: "otto"})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, ctx, conn, "2 pending")

	// checkout-1 receives the command with its next report and answers it
	// in the one after, as an agent on HTTP ingest does.
	res := h.report("checkout", "payments", "checkout-1", protocol.StateClosed)
	if len(res.Commands) != 1 || res.Commands[0].ID != cmd.ID {
		t.Fatalf("commands pending for checkout-1: %+v, want %s", res.Commands, cmd.ID)
	}
	now := h.clock.Now()
	h.ingest("checkout", "checkout-1", protocol.Batch{
		Transitions: []protocol.Transition{{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateForcedOpen, At: now.UnixMilli(),
			Cause: protocol.Cause{Kind: protocol.CauseCommand, CommandID: cmd.ID, Action: cmd.Action, Actor: cmd.Actor, Reason: cmd.Reason,
				ExpiresAt: cmd.ExpiresAt.UnixMilli()}}},
		CommandResults: []protocol.CommandResult{{ID: cmd.ID, Breaker: "payments", OK: true, State: protocol.StateForcedOpen, At: now.UnixMilli()}},
	})
	msg := readUntil(t, ctx, conn, "1 applied, 1 pending")
	if !strings.Contains(msg, "now forced open") {
		t.Errorf("result lacks the state after the command: %.500s", msg)
	}
}

func TestLiveEndsWithServiceRestartOnClose(t *testing.T) {
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 1, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := h.login("vera").dial(ctx, "view=audit", "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	readUntil(t, ctx, conn, `id="audit"`)
	h.srv.Load().Close()
	_, _, err = conn.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("close = %v, want 1012 service restart (the page reconnects)", err)
	}
}

func TestLiveOverviewResortsWorstFirstAfterAStateChange(t *testing.T) {
	h := newHarness(t, web.Config{}, dep("a-svc", "first", 1, 0), dep("b-svc", "second", 1, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := h.login("vera").dial(ctx, "view=overview", "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	first := readUntil(t, ctx, conn, `id="groups-inner"`)
	if strings.Index(first, "first") > strings.Index(first, "second") {
		t.Fatal("closed tiles are not sorted by name")
	}
	h.report("b-svc", "second", "b-svc-1", protocol.StateOpen)
	msg := readUntil(t, ctx, conn, "open on 1 of 1")
	if strings.Contains(msg, `id="groups-inner"`) {
		t.Fatal("the grid was re-sent at once; a tile swap was expected first")
	}
	h.virtual().Advance(6 * time.Second)
	grid := readUntil(t, ctx, conn, `id="groups-inner"`)
	if strings.Index(grid, "second") > strings.Index(grid, "first") {
		t.Error("the open dependency is not first after the re-sort")
	}
}
