package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
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
	u, _ := url.Parse(c.h.url)
	hdr := http.Header{}
	for _, ck := range c.hc.Jar.Cookies(u) {
		hdr.Add("Cookie", ck.Name+"="+ck.Value)
	}
	if origin != "" {
		hdr.Set("Origin", origin)
	}
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.h.url, "http")+"/live?"+query, &websocket.DialOptions{HTTPHeader: hdr})
}

// liveSocket is a page's live socket as a test reads it: one goroutine
// reads every message into msgs (and the error that ends the socket into
// end).
type liveSocket struct {
	h    *harness
	conn *websocket.Conn
	msgs chan string
	end  chan error
}

// live opens the live socket of a page as the client's user; the socket
// is closed when the test ends.
func (c *client) live(ctx context.Context, query string) *liveSocket {
	c.h.t.Helper()
	conn, _, err := c.dial(ctx, query, "")
	if err != nil {
		c.h.t.Fatalf("live socket %s: %v", query, err)
	}
	conn.SetReadLimit(-1) // a page of tiles is more than the default 32 KB
	s := &liveSocket{h: c.h, conn: conn, msgs: make(chan string, 64), end: make(chan error, 1)}
	go func() {
		for {
			_, msg, err := conn.Read(ctx)
			if err != nil {
				s.end <- err
				return
			}
			s.msgs <- string(msg)
		}
	}()
	c.h.t.Cleanup(func() { conn.CloseNow() })
	return s
}

// until reads messages until one contains want and returns every message
// read, that one last. While it waits it moves the harness's virtual clock
// on by the live interval every 20 ms of real time, as time would pass,
// so that whatever runs on the clock (live ticks, re-sorts) happens. It
// fails the test when the socket ends or after 10 s.
func (s *liveSocket) until(want string) []string {
	s.h.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var read []string
	for {
		select {
		case msg := <-s.msgs:
			read = append(read, msg)
			if strings.Contains(msg, want) {
				return read
			}
		case err := <-s.end:
			s.h.t.Fatalf("waiting for %q: the socket ended: %v", want, err)
		case <-deadline.C:
			s.h.t.Fatalf("waiting for %q: no such message in 10s (%d others)", want, len(read))
		case <-tick.C:
			s.h.tick()
		}
	}
}

// next is the last message of until(want): the one that contains want.
func (s *liveSocket) next(want string) string {
	s.h.t.Helper()
	read := s.until(want)
	return read[len(read)-1]
}

// published waits until the collector publishes an event of dependency k
// on events, moving the virtual clock on as until does (the collector
// publishes on its clock's ticks).
func (h *harness) published(events <-chan cbdash.Event, k cbdash.DependencyKey) {
	h.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				h.t.Fatal("the collector dropped the subscription")
			}
			if ev.Kind == cbdash.EventDependency && ev.Dependency.DependencyKey == k {
				return
			}
		case <-deadline.C:
			h.t.Fatalf("no event of %s in 10s", k)
		case <-tick.C:
			h.tick()
		}
	}
}

func TestLiveOverviewPushesChangedTiles(t *testing.T) {
	t.Parallel()
	// Quiet fleets: no tile changes as the clock moves on, only with
	// what the instances report.
	h := newHarness(t, web.Config{}, quiet(dep("checkout", "payments", 6, 0)), quiet(dep("checkout", "stock", 2, 0)))
	sock := h.login("vera").live(context.Background(), "view=overview")
	first := sock.next(`id="groups-inner"`)
	if !strings.Contains(first, `id="fleet"`) || !strings.Contains(first, "closed on 6 of 6") {
		t.Fatalf("first message is not the full overview: %.300s", first)
	}

	h.reportCalls("checkout", "payments", "checkout-1", protocol.StateOpen, 0)
	h.reportCalls("checkout", "payments", "checkout-2", protocol.StateOpen, 0)
	msg := sock.next("open on 2 of 6")
	if !strings.Contains(msg, `data-state="open"`) || !strings.Contains(msg, `id="fleet"`) {
		t.Errorf("update lacks the open tile or the counters: %.400s", msg)
	}
	if strings.Contains(msg, "stock") {
		t.Error("an unchanged tile was sent again")
	}

	// A report that changes nothing visible publishes payments again, but
	// sends no tile.
	_, events, unsubscribe := h.col.Subscribe()
	defer unsubscribe()
	h.reportCalls("checkout", "payments", "checkout-1", protocol.StateOpen, 0)
	h.published(events, cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
	h.reportCalls("checkout", "stock", "checkout-1", protocol.StateOpen, 0)
	for _, msg := range sock.until("open on 1 of 2") {
		if strings.Contains(msg, "open on 2 of 6") {
			t.Errorf("the unchanged payments tile was sent again: %.400s", msg)
		}
	}

	// A new dependency re-sends the grid.
	h.fleet(dep("search", "index", 1, 0))
	sock.next(`id="groups-inner"`)
}

func TestLiveRefusesForeignOriginsAndStrangers(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	ctx := context.Background()
	sock := h.login("vera").live(ctx, "view=dependency&service=checkout&breaker=payments")
	sock.next(`id="dep-commands"`)
	cmd, err := h.col.Issue(ctx, cbdash.Actor{Name: "otto"}, cbdash.CommandRequest{Service: "checkout", Breaker: "payments", Action: protocol.ActionForceOpen,
		TTL: 15 * time.Minute, Reason: "drill", Actor: "otto"})
	if err != nil {
		t.Fatal(err)
	}
	sock.next("2 pending")

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
	msg := sock.next("1 applied, 1 pending")
	if !strings.Contains(msg, "now forced open") {
		t.Errorf("result lacks the state after the command: %.500s", msg)
	}
}

func TestLiveEndsWithServiceRestartOnClose(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 1, 0))
	sock := h.login("vera").live(context.Background(), "view=audit")
	sock.next(`id="audit"`)
	h.srv.Close()
	select {
	case err := <-sock.end:
		if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
			t.Fatalf("close = %v, want 1012 service restart (the page reconnects)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the socket is still open 10s after Close")
	}
}

func TestLiveOverviewResortsWorstFirstAfterAStateChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("a-svc", "first", 1, 0), dep("b-svc", "second", 1, 0))
	sock := h.login("vera").live(context.Background(), "view=overview")
	first := sock.next(`id="groups-inner"`)
	if strings.Index(first, "first") > strings.Index(first, "second") {
		t.Fatal("closed tiles are not sorted by name")
	}
	secondID := regexp.MustCompile(`<article id="(t-[0-9a-f]+)"[^>]*>\s*<header>\s*<a class="name" href="/dependency\?service=b-svc`).FindStringSubmatch(first)
	if secondID == nil {
		t.Fatalf("no tile of b-svc in %.400s", first)
	}
	h.report("b-svc", "second", "b-svc-1", protocol.StateOpen)
	// At once, without the clock moving: the new order alone, not the grid.
	var order string
	for _, msg := range sock.until(`id="tile-order"`) {
		if strings.Contains(msg, `id="groups-inner"`) {
			t.Fatal("the grid was re-sent to re-sort it; the order alone was expected")
		}
		order = msg
	}
	m := regexp.MustCompile(`data-order="([^"]*)"`).FindStringSubmatch(order)
	if m == nil || !strings.HasPrefix(m[1], secondID[1]+" ") {
		t.Errorf("order %q, want the open b-svc tile %s first", order, secondID[1])
	}
}

func TestLiveOperatorPanelInstanceList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	ctx := context.Background()
	otto := h.login("otto").live(ctx, "view=dependency&service=checkout&breaker=payments")
	first := otto.next(`id="op-instance"`)
	if !strings.Contains(first, "checkout-1 (closed)") {
		t.Fatalf("operator's instance list: %.300s", first)
	}
	h.report("checkout", "payments", "checkout-1", protocol.StateOpen)
	otto.until("checkout-1 (open)")
	// A viewer has no operator panel: nothing is sent for it.
	vera := h.login("vera").live(ctx, "view=dependency&service=checkout&breaker=payments")
	for _, msg := range vera.until(`id="dep-head"`) {
		if strings.Contains(msg, `id="op-instance"`) {
			t.Fatal("the instance list was sent to a viewer")
		}
	}
}
