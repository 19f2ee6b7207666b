package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	colpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
)

func TestOTLPFlagsAreValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, want string
		o          otlpOptions
	}{
		{"a header without an endpoint", "--otlp-header needs --otlp-endpoint", otlpOptions{Headers: []string{"a=b"}}},
		{"not http", "--otlp-endpoint", otlpOptions{Endpoint: "otel:4318", Interval: 1}},
		{"no interval", "--otlp-interval", otlpOptions{Endpoint: "http://otel:4318"}},
		{"a header without =", "--otlp-header", otlpOptions{Endpoint: "http://otel:4318", Interval: 1, Headers: []string{"key"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := serveOptions{Addr: "127.0.0.1:0", DB: "x.db", LogLevel: "info", LogFormat: "text", OTLP: c.o}
			if err := o.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("validate: %v, want an error naming %s", err, c.want)
			}
		})
	}
}

// TestServeExportsOverOTLP: cbdash serve with --otlp-endpoint makes its
// last export when it shuts down, with the header of --otlp-header and
// the collector's figures.
func TestServeExportsOverOTLP(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []*colpb.ExportMetricsServiceRequest
	var keys []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m colpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil || r.URL.Path != "/v1/metrics" {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, &m)
		keys = append(keys, r.Header.Get("X-Key"))
		mu.Unlock()
	}))
	defer rcv.Close()
	o := serveOptions{Addr: "127.0.0.1:0", DB: filepath.Join(t.TempDir(), "cbdash.db"), LogLevel: "error", LogFormat: "text"}
	o.OTLP = otlpOptions{Endpoint: rcv.URL, Interval: time.Hour, Headers: []string{"X-Key=k1"}}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := openServer(ctx, o, slog.New(slog.DiscardHandler), clocktest.NewRunning())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx, nil) }()
	eventually.True(t, "GET /readyz: 200", func() bool {
		resp, err := http.Get(srv.URL() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || keys[0] != "k1" {
		t.Fatalf("%d exports (headers %q), want the last one at shutdown with X-Key k1", len(got), keys)
	}
	names := map[string]bool{}
	for _, sm := range got[0].ResourceMetrics[0].ScopeMetrics {
		for _, m := range sm.Metrics {
			names[m.Name] = true
		}
	}
	if !names["cbdash_dependencies_open"] || !names["cbdash_collector_agent_connections"] {
		t.Fatalf("exported %v", names)
	}
}

// jsonLines collects a logger's output and signals got at each write.
type jsonLines struct {
	mu    sync.Mutex
	lines []string
	got   chan struct{}
}

func (l *jsonLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, strings.Split(strings.TrimSuffix(string(p), "\n"), "\n")...)
	l.mu.Unlock()
	select {
	case l.got <- struct{}{}:
	default:
	}
	return len(p), nil
}

// TestServeLogsOTLPErrorsInItsLogFormat: cbdash serve --log-format json
// exporting to a receiver that refuses every export logs the periodic
// export's failure as a JSON line of its own log, naming the component
// and the receiver's answer (issue 30, item 5: it was plain text from the
// OpenTelemetry SDK's default logger).
func TestServeLogsOTLPErrorsInItsLogFormat(t *testing.T) {
	t.Parallel()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "refused", http.StatusBadRequest)
	}))
	defer rcv.Close()
	o := serveOptions{Addr: "127.0.0.1:0", DB: filepath.Join(t.TempDir(), "cbdash.db"), LogLevel: "info", LogFormat: "json"}
	o.OTLP = otlpOptions{Endpoint: rcv.URL, Interval: 20 * time.Millisecond}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	out := &jsonLines{got: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := openServer(ctx, o, o.logger(out), clocktest.NewRunning())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx, nil) }()
	bound := time.NewTimer(time.Minute) // a bound, not a pace
	defer bound.Stop()
	found := ""
	for found == "" {
		select {
		case <-out.got:
		case <-bound.C:
			t.Fatal("no OTLP export failure logged in a minute")
		}
		out.mu.Lock()
		for _, line := range out.lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				out.mu.Unlock()
				t.Fatalf("a log line that is not JSON: %q", line)
			}
			if rec["component"] == "otlp" && rec["level"] == "ERROR" && strings.Contains(fmt.Sprint(rec["err"]), "400 Bad Request") {
				found = line
			}
		}
		out.mu.Unlock()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("logged: %s", found)
}
