package web_test

// The security regression suite, quotas (issue 13, items 4 and 5): what
// one agent token can make the server hold, and how many live sockets
// one viewer can open.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// newLimitedHarness is newHarness with the collector's limits set to lim.
func newLimitedHarness(t *testing.T, cfg web.Config, lim collector.Limits) *harness {
	t.Helper()
	clk := clocktest.Virtual()
	h := &harness{t: t, clock: clk, users: map[string]string{}, reported: map[string]reported{}}
	h.run(stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.PublishInterval, c.Limits = 20*time.Millisecond, lim },
		Web: func(w *web.Config) {
			c := wired(cfg, *w)
			c.LiveInterval = 20 * time.Millisecond
			*w, h.cfg = c, c
		}})
	for _, u := range []struct{ name, role string }{{"vera", cbdash.RoleViewer}, {"otto", cbdash.RoleOperator}} {
		h.addUser(u.name, u.role, "password-"+u.name)
	}
	return h
}

// wideHello declares n breakers b0..b(n-1) for service/instance.
func wideHello(service, instance string, n int) protocol.Hello {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("b%d", i)
	}
	return hello(service, instance, names)
}

// helloIngest ingests an empty first batch after hi with token.
func (h *harness) helloIngest(token string, hi protocol.Hello) (int, string) {
	h.t.Helper()
	return h.ingestWith(token, protocol.IngestRequest{Hello: hi,
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: h.clock.Now().UnixMilli()}})
}

func TestSecurityAgentTokensCannotFillTheServer(t *testing.T) {
	t.Parallel()
	// Hellos of 100 breakers against a cap of 4,000: the same counts as
	// 1,000-breaker hellos (the protocol's most) against 40,000, which
	// took 36 s of the suite under the race detector.
	const width = 100
	t.Run("the 41st hundred-breaker ingest is refused", func(t *testing.T) {
		h := newLimitedHarness(t, web.Config{}, collector.Limits{MaxDependencies: 40 * width})
		// One token ("*") stops at its quota, half of the server's
		// (issue 27): two are needed to fill it.
		second, err := h.st.CreateAgentToken(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		third, err := h.st.CreateAgentToken(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 41; i++ {
			tok := h.stack.AgentToken
			switch {
			case i == 41:
				tok = third
			case i > 21:
				tok = second
			}
			status, body := h.helloIngest(tok, wideHello(fmt.Sprintf("svc%d", i), "i-1", width))
			switch {
			case i <= 20 && status != http.StatusOK:
				t.Fatalf("ingest %d = %d %s", i, status, body)
			case i == 21 && (status != http.StatusForbidden || !strings.Contains(body, "--max-dependencies-per-token")):
				t.Fatalf("the 21st ingest = %d %s, want 403 naming --max-dependencies-per-token", status, body)
			case i == 21:
				if status, body := h.helloIngest(second, wideHello("svc21", "i-1", width)); status != http.StatusOK {
					t.Fatalf("the 21st service with another token = %d %s", status, body)
				}
			case i > 21 && i <= 40 && status != http.StatusOK:
				t.Fatalf("ingest %d with a second token = %d %s", i, status, body)
			case i == 41 && (status != http.StatusForbidden || !strings.Contains(body, "(serve flag --max-dependencies)")):
				t.Fatalf("the 41st ingest = %d %s, want 403 naming --max-dependencies", status, body)
			}
		}
		if n := len(h.col.Dependencies()); n != 40*width {
			t.Errorf("the collector holds %d dependencies, want %d", n, 40*width)
		}
		// Known dependencies still report.
		if status, body := h.helloIngest(h.stack.AgentToken, wideHello("svc1", "i-2", 10)); status != http.StatusOK {
			t.Errorf("another instance of known dependencies = %d %s", status, body)
		}
	})

	t.Run("one token's instances and breakers are bounded, another token's are not", func(t *testing.T) {
		h := newLimitedHarness(t, web.Config{}, collector.Limits{MaxInstancesPerToken: 3, MaxBreakersPerToken: 250})
		ctx := t.Context()
		tok, err := h.st.CreateAgentToken(ctx, "checkout")
		if err != nil {
			t.Fatal(err)
		}
		other, err := h.st.CreateAgentToken(ctx, "checkout")
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			if status, body := h.helloIngest(tok, wideHello("checkout", fmt.Sprintf("checkout-%d", i), 50)); status != http.StatusOK {
				t.Fatalf("instance %d = %d %s", i, status, body)
			}
		}
		status, body := h.helloIngest(tok, wideHello("checkout", "checkout-4", 1))
		if status != http.StatusForbidden || !strings.Contains(body, "--max-instances-per-token") {
			t.Errorf("a 4th instance = %d %s, want 403 naming --max-instances-per-token", status, body)
		}
		// The same instance may say hello again with more breakers, up to the limit.
		if status, body := h.helloIngest(tok, wideHello("checkout", "checkout-3", 150)); status != http.StatusOK {
			t.Errorf("checkout-3 with 150 breakers = %d %s", status, body)
		}
		status, body = h.helloIngest(tok, wideHello("checkout", "checkout-3", 151))
		if status != http.StatusForbidden || !strings.Contains(body, "--max-breakers-per-token") {
			t.Errorf("breakers over the token's limit = %d %s, want 403 naming --max-breakers-per-token", status, body)
		}
		if status, body := h.helloIngest(other, wideHello("checkout", "checkout-4", 10)); status != http.StatusOK {
			t.Errorf("another token's instance = %d %s", status, body)
		}

		t.Run("over the websocket the hello is refused with the reason", func(t *testing.T) {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			conn, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(h.url, "http")+"/api/v1/agent", &websocket.DialOptions{
				Subprotocols: []string{protocol.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			hi := wideHello("checkout", "checkout-5", 1)
			raw, _ := jsonMarshal(hi)
			if err := conn.Write(dctx, websocket.MessageText, raw); err != nil {
				t.Fatal(err)
			}
			_, msg, err := conn.Read(dctx)
			if err != nil || !strings.Contains(string(msg), `"fatal":true`) || !strings.Contains(string(msg), "--max-instances-per-token") {
				t.Errorf("hello of a 4th instance over the websocket: %s %v", msg, err)
			}
		})
		t.Run("the refusals are counted", func(t *testing.T) {
			res, err := http.Get(h.url + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			for _, want := range []string{`cbdash_collector_agent_refused_total{reason="instance_limit"} 2`, `cbdash_collector_agent_refused_total{reason="breaker_limit"} 1`} {
				if !strings.Contains(string(b), want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
		})
	})
}

func TestSecurityLiveSocketsAreCapped(t *testing.T) {
	t.Parallel()
	h := newLimitedHarness(t, web.Config{Live: web.LiveLimits{PerSession: 2, PerAddress: 3, Total: 4},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, collector.Limits{})
	// A bound against a hang, not a timing claim: on a busy machine the
	// dials and first messages below took more than 20 s together.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// from dials the overview's live socket as c, from client address
	// addr (the loopback proxy is trusted, so X-Forwarded-For names it).
	from := func(c *client, addr string) (*websocket.Conn, int, string) {
		t.Helper()
		u := c.h.url
		hdr := http.Header{"X-Forwarded-For": {addr}}
		for _, ck := range c.hc.Jar.Cookies(mustURL(u)) {
			hdr.Add("Cookie", ck.Name+"="+ck.Value)
		}
		conn, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(u, "http")+"/live?view=overview", &websocket.DialOptions{HTTPHeader: hdr})
		if err != nil {
			if res == nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			return nil, res.StatusCode, string(b)
		}
		t.Cleanup(func() { conn.CloseNow() })
		if _, _, err := conn.Read(ctx); err != nil {
			t.Fatalf("first live message: %v", err)
		}
		return conn, http.StatusSwitchingProtocols, ""
	}
	otto, vera, vera2 := h.login("otto"), h.login("vera"), h.login("vera")
	first, _, _ := from(otto, "198.51.100.1")
	from(otto, "198.51.100.1")
	if _, status, body := from(otto, "198.51.100.1"); status != http.StatusTooManyRequests || !strings.Contains(body, "per session") {
		t.Errorf("a 3rd socket of one session = %d %s, want 429 saying per session", status, body)
	}
	from(vera, "198.51.100.1")
	if _, status, body := from(vera, "198.51.100.1"); status != http.StatusTooManyRequests || !strings.Contains(body, "per address") {
		t.Errorf("a 4th socket of one address = %d %s, want 429 saying per address", status, body)
	}
	from(vera2, "198.51.100.2")
	if _, status, body := from(vera2, "198.51.100.3"); status != http.StatusTooManyRequests || !strings.Contains(body, "--max-live") {
		t.Errorf("a 5th socket of the server = %d %s, want 429 naming the total limit", status, body)
	}
	first.Close(websocket.StatusNormalClosure, "")
	eventually.True(t, "a closed socket gives its slot back", func() bool {
		conn, status, _ := func() (*websocket.Conn, int, string) {
			hdr := http.Header{"X-Forwarded-For": {"198.51.100.4"}}
			conn, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/live?view=overview", &websocket.DialOptions{HTTPHeader: cookieHeader(vera2, hdr)})
			if err != nil {
				if res != nil {
					return nil, res.StatusCode, ""
				}
				return nil, 0, ""
			}
			return conn, http.StatusSwitchingProtocols, ""
		}()
		if conn != nil {
			conn.CloseNow()
		}
		return status == http.StatusSwitchingProtocols
	})
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// cookieHeader adds c's cookies to hdr.
func cookieHeader(c *client, hdr http.Header) http.Header {
	for _, ck := range c.hc.Jar.Cookies(mustURL(c.h.url)) {
		hdr.Add("Cookie", ck.Name+"="+ck.Value)
	}
	return hdr
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// TestSecurityEventStreamsAreCapped: /api/v1/events (server-sent events)
// is capped per API token or session, per client address and in total,
// as /live is (issue 27, item 9: 300 streams on one viewer token were
// accepted); a refusal is a 429 naming the cap, counted in /metrics.
func TestSecurityEventStreamsAreCapped(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := newLimitedHarness(t, web.Config{Events: web.LiveLimits{PerSession: 3, PerAddress: 5, Total: 6}, Registerer: reg,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, collector.Limits{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	vera, _, err := h.st.UserByName(ctx, "vera")
	if err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for range 3 {
		tok, err := h.st.CreateUserToken(ctx, vera.ID, "events")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	// open opens an event stream with token from client address addr (the
	// loopback proxy is trusted, so X-Forwarded-For names it): the open
	// stream's body (closed at the end of the test), or nil and the
	// refusal's status and body.
	open := func(token, addr string) (io.ReadCloser, int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/api/v1/events?snapshot=1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Forwarded-For", addr)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			return nil, res.StatusCode, string(b)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res.Body, res.StatusCode, ""
	}
	mustOpen := func(token, addr string) io.ReadCloser {
		t.Helper()
		body, status, msg := open(token, addr)
		if body == nil {
			t.Fatalf("an event stream from %s = %d %s, want 200", addr, status, msg)
		}
		return body
	}
	first := mustOpen(tokens[0], "198.51.100.1")
	mustOpen(tokens[0], "198.51.100.1")
	mustOpen(tokens[0], "198.51.100.1")
	if _, status, body := open(tokens[0], "198.51.100.1"); status != http.StatusTooManyRequests || !strings.Contains(body, "per session") || !strings.Contains(body, "--max-event-streams-per-session") {
		t.Errorf("a 4th stream of one token = %d %s, want 429 naming --max-event-streams-per-session", status, body)
	}
	// Another token of the same viewer still gets its own.
	mustOpen(tokens[1], "198.51.100.1")
	mustOpen(tokens[1], "198.51.100.1")
	if _, status, body := open(tokens[1], "198.51.100.1"); status != http.StatusTooManyRequests || !strings.Contains(body, "--max-event-streams-per-address") {
		t.Errorf("a 6th stream of one address = %d %s, want 429 naming --max-event-streams-per-address", status, body)
	}
	mustOpen(tokens[1], "198.51.100.2")
	if _, status, body := open(tokens[2], "198.51.100.3"); status != http.StatusTooManyRequests || !strings.Contains(body, "--max-event-streams,") && !strings.Contains(body, "--max-event-streams)") {
		t.Errorf("a 7th stream of the server = %d %s, want 429 naming --max-event-streams", status, body)
	}
	first.Close()
	eventually.True(t, "a closed stream gives its slot back", func() bool {
		body, _, _ := open(tokens[0], "198.51.100.1")
		if body != nil {
			body.Close()
		}
		return body != nil
	})
	// (Tries of the loop above before the slot was back were refused
	// over the total too.)
	for _, limit := range []string{"session", "address", "total"} {
		if n := counter(t, reg, "cbdash_streams_refused_total", limit); n < 1 || limit != "total" && n != 1 {
			t.Errorf("cbdash_streams_refused_total{stream=events,limit=%s} = %v, want 1", limit, n)
		}
	}
}
