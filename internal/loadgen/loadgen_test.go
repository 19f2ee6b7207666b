package loadgen_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/loadgen"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunMeasuresAgainstARealCollector runs a small fleet against a real
// collector on a real SQLite file over loopback.
func TestRunMeasuresAgainstARealCollector(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "cbdash.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	col, err := collector.New(collector.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	col.Mount(e, collector.Auth{})
	srv := httptest.NewServer(e)
	defer srv.Close()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- col.Run(rctx) }()
	defer func() { stop(); <-done }()
	token, err := st.CreateAgentToken(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var res loadgen.Result
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err = loadgen.Run(ctx, loadgen.Config{
			URL: srv.URL, Token: token, Instances: 20, BreakersPerInstance: 5,
			Interval: 100 * time.Millisecond, Duration: 3 * time.Second, TransitionEvery: 200 * time.Millisecond,
		})
		if err == nil || time.Now().After(deadline) { // Run may not have restored state yet: retried
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	// 20 instances x 5 breakers every 100 ms offer 1,000 reports a second;
	// what is acknowledged depends on the machine (and -race), so the test
	// checks that the measures are taken, not a rate.
	if res.Instances != 20 || res.Windows == 0 || res.Offered < 500 || res.Refused != 0 || res.Errors != 0 {
		t.Fatalf("result %+v", res)
	}
	if res.Seen == 0 || res.Seen > res.Sent || res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 {
		t.Fatalf("transitions seen %d of %d, p50 %v p99 %v max %v", res.Seen, res.Sent, res.P50, res.P99, res.Max)
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  loadgen.Config
	}{
		{"no URL", loadgen.Config{Token: "t"}},
		{"websocket URL", loadgen.Config{URL: "ws://127.0.0.1:1", Token: "t"}},
		{"no token", loadgen.Config{URL: "http://127.0.0.1:1"}},
		{"negative instances", loadgen.Config{URL: "http://127.0.0.1:1", Token: "t", Instances: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := loadgen.Run(context.Background(), tt.cfg); !errors.Is(err, loadgen.ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
}
