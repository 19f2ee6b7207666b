package collector

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func call(t *testing.T, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func TestJSONAPI(t *testing.T) {
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	b := h.batch(1, 20, 15, h.trans(protocol.StateClosed, protocol.StateOpen, 1))
	b.Dropped = &protocol.Dropped{Windows: 3, Calls: 42, Lost: []protocol.LostSpan{
		{Breaker: "db", Start: b.SentAt - 5000, End: b.SentAt - 2000, Calls: 42}}}
	a.send(b)
	a.expect(protocol.TypeAck, nil)
	waitForState(t, h, protocol.StateOpen)
	u := h.srv.URL
	tests := []struct {
		name, method, path string
		body               any
		status             int
		contains           string
	}{
		{"healthz", "GET", "/healthz", nil, 200, "ok"},
		{"readyz", "GET", "/readyz", nil, 200, "ready"},
		{"services", "GET", "/api/v1/services", nil, 200, `"name":"api","state":"open","breakers":2,"instances":1`},
		{"breakers", "GET", "/api/v1/breakers?service=api", nil, 200, `"breaker":"db","state":"open"`},
		{"one breaker", "GET", "/api/v1/breakers/api/db", nil, 200, `"opens_today":1`},
		{"unknown breaker", "GET", "/api/v1/breakers/api/queue", nil, 404, "not found"},
		{"history", "GET", "/api/v1/breakers/api/db/history?resolution=second", nil, 200, `"admitted":20`},
		{"gaps", "GET", "/api/v1/breakers/api/db/gaps", nil, 200, `"instance":"a1",`},
		{"gaps count the lost calls", "GET", "/api/v1/breakers/api/db/gaps", nil, 200, `"lost_calls":42}`},
		{"no gaps of another breaker", "GET", "/api/v1/breakers/api/cache/gaps", nil, 200, `[]`},
		{"gaps bad range", "GET", "/api/v1/breakers/api/db/gaps?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", nil, 400, "before"},
		{"history bad resolution", "GET", "/api/v1/breakers/api/db/history?resolution=week", nil, 400, "resolution"},
		{"history bad range", "GET", "/api/v1/breakers/api/db/history?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", nil, 400, "before"},
		{"transitions", "GET", "/api/v1/transitions?service=api&breaker=db", nil, 200, `"to":"open"`},
		{"transitions bad limit", "GET", "/api/v1/transitions?limit=-1", nil, 400, "limit"},
		{"issue", "POST", "/api/v1/commands", map[string]any{"service": "api", "breaker": "db", "action": "force_open", "ttl": "5m", "reason": "drill"}, 201, `"status":"pending"`},
		{"issue without ttl", "POST", "/api/v1/commands", map[string]any{"service": "api", "breaker": "db", "action": "force_open"}, 400, "ttl is required"},
		{"issue unknown breaker", "POST", "/api/v1/commands", map[string]any{"service": "api", "breaker": "nope", "action": "reset"}, 404, "not found"},
		{"commands", "GET", "/api/v1/commands?service=api", nil, 200, `"reason":"drill"`},
		{"unknown command", "GET", "/api/v1/commands/nope", nil, 404, "not found"},
		{"metrics", "GET", "/metrics", nil, 200, `cbdash_breaker_state{breaker="db",service="api",state="open"} 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, tt.method, u+tt.path, "", tt.body)
			if status != tt.status || !strings.Contains(string(body), tt.contains) {
				t.Fatalf("%s %s: %d %s; want %d containing %s", tt.method, tt.path, status, body, tt.status, tt.contains)
			}
		})
	}
}

func TestMetricsStateSeriesIsRewritten(t *testing.T) {
	h := startHarness(t, "", func(c *Config) { c.MetricsToken = "s3cret" })
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.send(h.batch(1, 10, 10, h.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	a.expect(protocol.TypeAck, nil)
	if status, _ := call(t, "GET", h.srv.URL+"/metrics", "", nil); status != http.StatusUnauthorized {
		t.Fatalf("metrics without the token: %d, want 401", status)
	}
	a.send(h.batch(2, 10, 0, h.trans(protocol.StateOpen, protocol.StateHalfOpen, 1)))
	a.expect(protocol.TypeAck, nil)
	waitForState(t, h, protocol.StateHalfOpen) // computing the aggregate rewrites the series
	_, body := call(t, "GET", h.srv.URL+"/metrics", "s3cret", nil)
	text := string(body)
	for _, want := range []string{
		`cbdash_breaker_state{breaker="db",service="api",state="half_open"} 1`,
		`cbdash_breaker_calls_total{breaker="db",outcome="error",service="api"} 10`,
		`cbdash_breaker_calls_total{breaker="db",outcome="success",service="api"} 10`,
		`cbdash_collector_batches_total{result="stored"} 2`,
		`cbdash_collector_window_reports_total 2`,
		`cbdash_collector_agent_connections 1`,
		`cbdash_breaker_instances{breaker="db",service="api",state="half_open"} 1`,
		`cbdash_breaker_instances{breaker="db",service="api",state="open"} 0`,
		`cbdash_dependencies_open 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, `cbdash_breaker_state{breaker="db",service="api",state="open"}`) {
		t.Error("the old state series is still exported")
	}
}

func TestHTTPIngest(t *testing.T) {
	h := startHarness(t, "", nil)
	limited, err := h.store.CreateAgentToken(t.Context(), "billing")
	if err != nil {
		t.Fatal(err)
	}
	url := h.srv.URL + "/api/v1/ingest"
	req := protocol.IngestRequest{Hello: rawHello("h1", 5), Batch: h.batch(1, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, 1))}
	bad := req
	bad.Batch = h.batch(2, 10, 0)
	bad.Batch.Windows[0].State = "melting"
	tests := []struct {
		name     string
		token    string
		body     any
		status   int
		contains string
	}{
		{"stored", h.token, req, 200, `"acked_seq":1`},
		{"duplicate is acked", h.token, req, 200, `"acked_seq":1`},
		{"invalid batch", h.token, bad, 400, "melting"},
		{"bad token", "nope", req, 401, "unauthorized"},
		{"token of another service", limited, req, 403, "billing"},
		{"not an ingest request", h.token, []int{1}, 400, "ingest request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, "POST", url, tt.token, tt.body)
			if status != tt.status || !strings.Contains(string(body), tt.contains) {
				t.Fatalf("%d %s; want %d containing %s", status, body, tt.status, tt.contains)
			}
		})
	}
	if ts := storedTransitions(t, h, "h1"); len(ts) != 1 {
		t.Fatalf("%d transitions stored, want exactly 1", len(ts))
	}
	// A pending command comes back in the response.
	if _, err := h.col.Issue(t.Context(), cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionReset, Instance: "h1"}); err != nil {
		t.Fatal(err)
	}
	next := req
	next.Batch = h.batch(2, 1, 0)
	_, body := call(t, "POST", url, h.token, next)
	var resp protocol.IngestResponse
	if err := json.Unmarshal(body, &resp); err != nil || resp.AckedSeq != 2 || len(resp.Commands) != 1 || resp.Commands[0].Action != protocol.ActionReset {
		t.Fatalf("response %s (%v)", body, err)
	}
}

func TestEventStream(t *testing.T) {
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	resp, err := http.Get(h.srv.URL + "/api/v1/events?kind=transition&snapshot=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	readEvent := func() (kind string, data []byte) {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			switch {
			case strings.HasPrefix(line, "event: "):
				kind = strings.TrimSpace(line[7:])
			case strings.HasPrefix(line, "data: "):
				data = []byte(line[6:])
			case line == "\n" && kind != "":
				return kind, data
			}
		}
	}
	if kind, data := readEvent(); kind != "snapshot" || !strings.Contains(string(data), `"breaker":"db"`) {
		t.Fatalf("first event %s %s", kind, data)
	}
	sent := time.Now() // real time: a latency for the log
	a.send(h.batch(1, 5, 5, h.trans(protocol.StateClosed, protocol.StateOpen, 1)))
	kind, data := readEvent()
	var e cbdash.Event
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatal(err)
	}
	if kind != cbdash.EventTransition || e.Transition.Instance != "a1" || e.Transition.To != protocol.StateOpen {
		t.Fatalf("event %s %s", kind, data)
	}
	t.Logf("transition to SSE subscriber in %v", time.Since(sent))
}

// waitForState waits until live state shows api/db in state (it is
// updated off the connection's goroutine).
func waitForState(t *testing.T, h *harness, state string) {
	t.Helper()
	eventually.True(t, "api/db "+state, func() bool {
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: "db"})
		return err == nil && d.State == state
	})
}
