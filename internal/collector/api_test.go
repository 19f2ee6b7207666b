package collector

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
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

func TestQueries(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	b := h.batch(1, 20, 15, h.trans(protocol.StateClosed, protocol.StateOpen, 1))
	b.Dropped = &protocol.Dropped{Windows: 3, Calls: 42, Lost: []protocol.LostSpan{
		{Breaker: "db", Start: b.SentAt - 5000, End: b.SentAt - 2000, Calls: 42}}}
	a.send(b)
	a.expect(protocol.TypeAck, nil)
	waitForState(t, h, protocol.StateOpen)
	ctx := t.Context()
	if svcs := h.col.Services(); len(svcs) != 1 || svcs[0].Name != "api" || svcs[0].State != protocol.StateOpen || svcs[0].Instances != 1 {
		t.Errorf("services %+v", svcs)
	}
	db := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	window := cbdash.HistoryQuery{DependencyKey: db, From: h.now().Add(-time.Hour), To: h.now().Add(time.Minute), Resolution: cbdash.ResolutionSecond}
	pts, err := h.col.History(ctx, window)
	if err != nil || len(pts) == 0 || pts[0].Counts.Admitted != 20 {
		t.Errorf("history %+v (%v)", pts, err)
	}
	gaps, err := h.col.Gaps(ctx, window)
	if err != nil || len(gaps) != 1 || gaps[0].Instance != "a1" || gaps[0].Calls != 42 {
		t.Errorf("gaps %+v (%v)", gaps, err)
	}
	other := window
	other.DependencyKey = cbdash.DependencyKey{Service: "api", Breaker: "cache"}
	if gaps, err := h.col.Gaps(ctx, other); err != nil || len(gaps) != 0 {
		t.Errorf("gaps of another breaker %+v (%v)", gaps, err)
	}
	unknown := window
	unknown.DependencyKey = cbdash.DependencyKey{Service: "api", Breaker: "queue"}
	if _, err := h.col.History(ctx, unknown); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("history of an unknown breaker: %v, want not found", err)
	}
	if _, err := h.col.Issue(ctx, cbdash.Actor{}, cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionReset}); !errors.Is(err, cbdash.ErrInvalid) {
		t.Errorf("a command by nobody: %v, want invalid", err)
	}
	if status, cause := h.col.Readiness(ctx); status != "ready" || cause != nil {
		t.Errorf("readiness %q %v", status, cause)
	}
}

func TestMetricsStateSeriesIsRewritten(t *testing.T) {
	t.Parallel()
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
		`cbdash_breaker_calls_total{breaker="db",collector="local",outcome="error",service="api"} 10`,
		`cbdash_breaker_calls_total{breaker="db",collector="local",outcome="success",service="api"} 10`,
		`cbdash_collector_batches_total{result="stored"} 2`,
		`cbdash_collector_window_reports_total 2`,
		`cbdash_collector_agent_connections 1`,
		`cbdash_breaker_instances{breaker="db",service="api",state="half_open"} 1`,
		`cbdash_breaker_instances{breaker="db",service="api",state="open"} 0`,
		`cbdash_dependencies_open 0`,
		`cbdash_store_retried_groups_total 0`, // one writer: never a deadlock's victim
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
	t.Parallel()
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
	if _, err := h.col.Issue(t.Context(), cbdash.Actor{Name: "test"}, cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionReset, Instance: "h1"}); err != nil {
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
	t.Parallel()
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
