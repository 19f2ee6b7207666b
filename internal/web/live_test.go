package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
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
		t.Fatalf("first message is not the full overview: %.300s", first)
	}

	open := dep("checkout", "payments", 6, 2)
	h.live.publish(cbdash.Event{Kind: cbdash.EventDependency, At: time.Now(), Dependency: &open})
	msg := readUntil(t, ctx, conn, "open on 2 of 6")
	if !strings.Contains(msg, `data-state="open"`) || !strings.Contains(msg, `id="fleet"`) {
		t.Errorf("update lacks the open tile or the counters: %.400s", msg)
	}
	if strings.Contains(msg, "stock") {
		t.Error("an unchanged tile was sent again")
	}

	// An event that changes nothing visible sends no tile.
	same := open
	h.live.publish(cbdash.Event{Kind: cbdash.EventDependency, At: time.Now(), Dependency: &same})
	stock := dep("checkout", "stock", 2, 1)
	h.live.publish(cbdash.Event{Kind: cbdash.EventDependency, At: time.Now(), Dependency: &stock})
	msg = readUntil(t, ctx, conn, "open on 1 of 2")
	if strings.Contains(msg, "open on 2 of 6") {
		t.Error("the unchanged payments tile was sent again")
	}

	// A new dependency re-sends the grid.
	fresh := dep("search", "index", 1, 0)
	h.live.publish(cbdash.Event{Kind: cbdash.EventDependency, At: time.Now(), Dependency: &fresh})
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
	cmd, err := h.live.Issue(ctx, cbdash.CommandRequest{Service: "checkout", Breaker: "payments", Action: protocol.ActionForceOpen,
		TTL: 15 * time.Minute, Reason: "drill", Actor: "otto"})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, ctx, conn, "2 pending")
	if err := h.st.SetCommandTarget(ctx, cmd.ID, cbdash.CommandTarget{Instance: "checkout-1", Status: cbdash.TargetApplied, State: protocol.StateForcedOpen, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	h.live.publish(cbdash.Event{Kind: cbdash.EventCommand, At: time.Now(), Command: &cmd})
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
	h.srv.Close()
	_, _, err = conn.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("close = %v, want 1012 service restart (the page reconnects)", err)
	}
}

func TestLiveOverviewResortsWorstFirstAfterAStateChange(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h := newHarness(t, web.Config{Clock: clockAt(clock)}, dep("a-svc", "first", 1, 0), dep("b-svc", "second", 1, 0))
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
	open := dep("b-svc", "second", 1, 1)
	h.live.publish(cbdash.Event{Kind: cbdash.EventDependency, At: time.Now(), Dependency: &open})
	msg := readUntil(t, ctx, conn, "open on 1 of 1")
	if strings.Contains(msg, `id="groups-inner"`) {
		t.Fatal("the grid was re-sent at once; a tile swap was expected first")
	}
	mu.Lock()
	now = now.Add(6 * time.Second)
	mu.Unlock()
	again := open
	h.live.publish(cbdash.Event{Kind: cbdash.EventDependency, At: time.Now(), Dependency: &again})
	grid := readUntil(t, ctx, conn, `id="groups-inner"`)
	if strings.Index(grid, "second") > strings.Index(grid, "first") {
		t.Error("the open dependency is not first after the re-sort")
	}
}
