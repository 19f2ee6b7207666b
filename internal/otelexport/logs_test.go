package otelexport_test

import (
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash/internal/otelexport"
)

// lineLog collects what is written to it, line by line, and signals got
// at each write.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	got   chan struct{}
}

func newLineLog() *lineLog { return &lineLog{got: make(chan struct{}, 1)} }

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, strings.Split(strings.TrimSuffix(string(p), "\n"), "\n")...)
	l.mu.Unlock()
	select {
	case l.got <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *lineLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestSDKErrorsGoToTheExportersLogger: a periodic export that the
// receiver refuses (400) is reported by the OpenTelemetry SDK's error
// handler, which prints plain text with the standard log package unless
// told otherwise (issue 30, item 5); here it is a JSON line of the
// exporter's Logger, at level ERROR, with the SDK's error, and nothing
// is printed by the standard logger. Not parallel: it reads the standard
// logger's output.
func TestSDKErrorsGoToTheExportersLogger(t *testing.T) {
	std := newLineLog()
	prev := log.Writer()
	log.SetOutput(std)
	t.Cleanup(func() { log.SetOutput(prev) })
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no metrics here", http.StatusBadRequest) // not retried by the exporter
	}))
	defer rcv.Close()
	js := newLineLog()
	exp, err := otelexport.New(context.Background(), otelexport.Config{Endpoint: rcv.URL, Interval: 20 * time.Millisecond,
		Gatherer: prometheus.NewRegistry(), Logger: slog.New(slog.NewJSONHandler(js, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := exp.Shutdown(context.Background()); err == nil {
			t.Error("the last export to a receiver that refuses all succeeded")
		}
	}()
	// Until the first periodic export's report, wherever it goes (a
	// bound, not a pace).
	bound := time.NewTimer(time.Minute)
	defer bound.Stop()
	for {
		select {
		case <-js.got:
		case <-std.got:
		case <-bound.C:
			t.Fatalf("no export was reported in a minute; the logger has %q", js.all())
		}
		if lines := std.all(); len(lines) > 0 {
			t.Fatalf("the standard logger printed the SDK's report as plain text: %q", lines)
		}
		for _, line := range js.all() {
			var rec struct {
				Level, Msg, Err string
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("not a JSON line: %q (%v)", line, err)
			}
			if rec.Level == "ERROR" {
				if !strings.Contains(rec.Msg, "OTLP export") || !strings.Contains(rec.Err, "400") {
					t.Fatalf("the SDK's report: %q, want an ERROR about the OTLP export with the receiver's 400", line)
				}
				return
			}
		}
	}
}
