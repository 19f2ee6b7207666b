package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// lockedBuffer is a log destination safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeWiresEveryDashboardService builds the real server as `cbdash
// serve` does and reads every page whose service is optional in
// web.Config: each answers (none is a 404 or a missing part because a
// service was left out of the wiring), and the dashboard logs no feature
// off.
func TestServeWiresEveryDashboardService(t *testing.T) {
	dir := t.TempDir()
	var o serveOptions
	o.Addr, o.DB, o.Anonymous = "127.0.0.1:0", filepath.Join(dir, "cbdash.db"), true
	o.LogLevel, o.LogFormat = "info", "text"
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	clk := clocktest.NewRunning()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := openServer(ctx, o, slog.New(slog.NewTextHandler(&logs, nil)), clk)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	if strings.Contains(logs.String(), "dashboard feature off") {
		t.Fatalf("cbdash serve leaves a dashboard service out:\n%s", logs.String())
	}

	// One instance, so the dependency page has a heatmap to draw.
	token, err := srv.store.CreateAgentToken(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	req := protocol.IngestRequest{
		Hello: protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: "checkout-1",
			SDKVersion: "test", StartedAt: 1, Breakers: []protocol.BreakerConfig{{Name: "payments", WindowKind: "count", WindowSize: 100,
				FailureRateThreshold: 50, MinimumCalls: 20, OpenDurationMillis: 10000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}},
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now.UnixMilli(), Windows: []protocol.Window{{
			Breaker: "payments", Start: now.Add(-time.Second).UnixMilli(), Millis: 1000, State: protocol.StateClosed}}},
	}
	body, _ := json.Marshal(req)
	// The first ingest may come before the collector is ready (503).
	eventually.True(t, "POST /api/v1/ingest: 200", func() bool {
		hr, _ := http.NewRequest(http.MethodPost, srv.URL()+"/api/v1/ingest", bytes.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+token)
		hr.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(hr)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	eventually.True(t, "checkout/payments is live", func() bool {
		_, err := srv.col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		return err == nil
	})

	for _, c := range []struct{ path, want string }{
		{"/holds", "Holds"},                            // Config.Holds
		{"/api/v1/holds", "["},                         // Config.Holds
		{"/incidents", "Incidents"},                    // Config.Incidents
		{"/api/v1/incidents", "["},                     // Config.Incidents
		{"/alerts", "Alerts"},                          // Config.Alerts
		{"/overview/fleet-timeline", "fleet-timeline"}, // Config.FleetHistory
		{"/", `data-testid="fleet-timeline"`},          // Config.FleetHistory
		{"/dependency?service=checkout&breaker=payments", `data-testid="heatmap"`}, // Config.InstanceHistory
	} {
		res, err := http.Get(srv.URL() + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(b), c.want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%.300s", c.path, res.StatusCode, c.want, b)
		}
	}
}
