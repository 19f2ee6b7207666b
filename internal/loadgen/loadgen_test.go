package loadgen_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/loadgen"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunMeasuresAgainstARealCollector runs a small fleet against the
// server stack (a real collector on a real SQLite file) over loopback; the
// simulated agents stamp with the server's clock, running from the test
// epoch.
func TestRunMeasuresAgainstARealCollector(t *testing.T) {
	clk := clocktest.NewRunning()
	// Anonymous: the transitions are read from /api/v1/events.
	s := stacktest.Start(t, stacktest.Options{Clock: clk, Web: func(c *web.Config) { c.Anonymous = true }})
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		URL: s.URL(), Token: s.AgentToken, Instances: 20, BreakersPerInstance: 5, Clock: clk,
		Interval: 100 * time.Millisecond, Duration: 3 * time.Second, TransitionEvery: 200 * time.Millisecond,
	})
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
	// The store's counters from /metrics: groups of at least one write.
	if res.StoreTxPerSec <= 0 || res.WritesPerTx < 1 {
		t.Fatalf("store: %.1f transactions/s, %.1f writes per transaction", res.StoreTxPerSec, res.WritesPerTx)
	}
	// The machine: its CPUs, its load average where the system tells
	// (Linux), and loadgen's own CPU, which the simulated agents spent.
	if res.CPUs != runtime.NumCPU() || res.LoadgenCPU <= 0 {
		t.Fatalf("machine: %d CPUs (want %d), loadgen %.2f cores", res.CPUs, runtime.NumCPU(), res.LoadgenCPU)
	}
	if runtime.GOOS == "linux" && (res.LoadStart < 0 || res.LoadEnd < 0) {
		t.Fatalf("load average %v at the start, %v at the end: /proc/loadavg not read", res.LoadStart, res.LoadEnd)
	}
	if !strings.Contains(res.String(), fmt.Sprintf("machine: %d CPUs, load average ", res.CPUs)) {
		t.Fatalf("the printed result does not give the machine:\n%s", res)
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
		{"websocket agent URL", loadgen.Config{URL: "http://127.0.0.1:1", AgentURLs: []string{"http://127.0.0.1:2", "ws://127.0.0.1:3"}, Token: "t"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := loadgen.Run(context.Background(), tt.cfg); !errors.Is(err, loadgen.ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
}

// TestRunSplitsItsFleetAndFiguresPerCollector gives the agents two
// collector URLs (the same server twice: what matters is the split): each
// gets half the agents, and the result says what each acked, adding up to
// the whole.
func TestRunSplitsItsFleetAndFiguresPerCollector(t *testing.T) {
	clk := clocktest.NewRunning()
	s := stacktest.Start(t, stacktest.Options{Clock: clk, Web: func(c *web.Config) { c.Anonymous = true }})
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		URL: s.URL(), AgentURLs: []string{s.URL(), s.URL() + "/"}, Token: s.AgentToken, Instances: 10, BreakersPerInstance: 4, Clock: clk,
		Interval: 100 * time.Millisecond, Duration: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if len(res.Collectors) != 2 {
		t.Fatalf("%d collectors in the result, want 2", len(res.Collectors))
	}
	var sum int64
	for i, c := range res.Collectors {
		if c.Windows == 0 {
			t.Fatalf("collector %d acked nothing: %+v", i+1, c)
		}
		sum += c.Windows
	}
	if sum != res.Windows {
		t.Fatalf("the collectors acked %d window reports together, the run %d", sum, res.Windows)
	}
	if !strings.Contains(res.String(), "collector 2 (") {
		t.Fatalf("the printed result does not give each collector:\n%s", res)
	}
}
