package demo

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startTestServer(t *testing.T, script Script, clock *breakertest.Clock) *Server {
	t.Helper()
	s, err := StartServer(ServerConfig{Name: "payments", Script: script, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// statuses makes n calls and counts statuses; connection errors count as 0.
func statuses(t *testing.T, c *http.Client, url string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		resp, err := c.Get(url)
		if err != nil {
			got[0]++
			continue
		}
		var a Answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatalf("decode: %v", err)
		}
		resp.Body.Close()
		if a.Status != resp.StatusCode || a.Dependency != "payments" {
			t.Fatalf("answer %+v does not match status %d", a, resp.StatusCode)
		}
		got[resp.StatusCode]++
	}
	return got
}

func TestServerFollowsTheScript(t *testing.T) {
	clock := clocktest.Virtual()
	script := Script{Phases: []Phase{
		{Name: "healthy", Duration: 10 * time.Second},
		{Name: "burst", Duration: 10 * time.Second, Fault: Fault{ErrorRate: 0.5, ErrorStatus: 503}},
		{Name: "business", Duration: 10 * time.Second, Fault: Fault{BusinessRate: 1}},
		{Name: "unavailable", Duration: 10 * time.Second, Fault: Fault{Unavailable: true}},
		{Name: "down", Duration: 10 * time.Second, Fault: Fault{Down: true}},
	}}
	s := startTestServer(t, script, clock)
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()

	tests := []struct {
		name string
		want map[int]int
	}{
		{"healthy", map[int]int{200: 20}},
		{"burst", map[int]int{200: 10, 503: 10}},
		{"business", map[int]int{404: 10, 400: 10}},
		{"unavailable", map[int]int{503: 20}},
		{"down", map[int]int{0: 20}},
		{"healthy again after the loop", map[int]int{200: 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := statuses(t, c, s.URL(), 20)
			if len(got) != len(tt.want) {
				t.Fatalf("statuses %v, want %v", got, tt.want)
			}
			for code, n := range tt.want {
				if d := got[code] - n; d < -1 || d > 1 {
					t.Fatalf("statuses %v, want %v", got, tt.want)
				}
			}
		})
		clock.Advance(10 * time.Second)
	}
}

func TestServerAppliesLatency(t *testing.T) {
	clock := clocktest.Virtual()
	script := Script{Phases: []Phase{{Name: "slow", Duration: time.Minute, Fault: Fault{Latency: 30 * time.Millisecond}}}}
	s := startTestServer(t, script, clock)
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	start := time.Now() // real time: latency is what clients feel
	resp, err := c.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("answer took %v, want at least 30ms", took)
	}
	if got := resp.Header.Get("X-Demo-Latency-Ms"); got != "30" {
		t.Errorf("X-Demo-Latency-Ms = %q, want 30", got)
	}
	if got := resp.Header.Get("X-Demo-Phase"); got != "slow" {
		t.Errorf("X-Demo-Phase = %q, want slow", got)
	}
}

func TestServerOffsetShiftsTheScript(t *testing.T) {
	clock := clocktest.Virtual()
	script := Script{Phases: []Phase{
		{Name: "first", Duration: 10 * time.Second},
		{Name: "second", Duration: 10 * time.Second},
	}}
	s, err := StartServer(ServerConfig{Name: "x", Script: script, Offset: 12 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, p, _ := s.Fault(); p.Name != "second" {
		t.Fatalf("phase %q at start with offset 12s, want second", p.Name)
	}
	clock.Advance(8 * time.Second)
	if _, p, _ := s.Fault(); p.Name != "first" {
		t.Fatalf("phase %q 8s later, want first (looped)", p.Name)
	}
}

func TestServerCloseCutsWaitingRequests(t *testing.T) {
	script := Script{Phases: []Phase{{Name: "stuck", Duration: time.Hour, Fault: Fault{Latency: time.Hour}}}}
	s, err := StartServer(ServerConfig{Name: "x", Script: script, Clock: clocktest.Virtual()})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Get(s.URL())
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	eventually.True(t, "the request being served", func() bool { return s.calls.Load() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-errc
}

func TestStartServerNeedsAName(t *testing.T) {
	if _, err := StartServer(ServerConfig{}); err == nil {
		t.Fatal("StartServer without a name succeeded")
	}
}
