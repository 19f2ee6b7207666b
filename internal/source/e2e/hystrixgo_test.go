package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/afex/hystrix-go/hystrix"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

var errScripted = errors.New("scripted failure")

// streamRecord reads the stream, as any Hystrix dashboard would, until a
// record of command satisfies ok.
func streamRecord(t *testing.T, url, command string, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually.Timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, found := strings.CutPrefix(sc.Text(), "data:")
		if !found {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(data), &rec) != nil || rec["type"] != "HystrixCommand" || rec["name"] != command {
			continue
		}
		nums := map[string]float64{}
		for k, v := range rec {
			if f, ok := v.(float64); ok {
				nums[k] = f
			}
		}
		if ok(nums) {
			return nums
		}
	}
	t.Fatalf("no record of %s as wanted within %v (%v)", command, eventually.Timeout, sc.Err())
	return nil
}

func TestHystrixGoStream(t *testing.T) {
	const command = "GetUser"
	hystrix.ConfigureCommand(command, hystrix.CommandConfig{
		Timeout: 1000, MaxConcurrentRequests: 10, RequestVolumeThreshold: 5, SleepWindow: 60000, ErrorPercentThreshold: 50,
	})
	sh := hystrix.NewStreamHandler()
	sh.Start()
	srv := httptest.NewServer(sh)
	stopped := false
	stopStream := func() {
		if !stopped {
			stopped = true
			sh.Stop()
			srv.CloseClientConnections()
			srv.Close()
		}
	}
	t.Cleanup(stopStream)

	st := stacktest.Start(t, stacktest.Options{Clock: clocktest.NewRunning(),
		Collector: func(c *collector.Config) { c.StaleAfter = 3 * time.Second }})
	src, err := source.New(source.Config{Sink: st.Collector, Clock: st.Clock, MaxBackoff: time.Second, Targets: []source.Target{{
		Kind: source.KindHystrix, URL: srv.URL + "/hystrix.stream", Service: "users", Instance: "users-1", Interval: source.Duration(3 * time.Second),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// The command exists before any call (hystrix-go's stream answers once
	// it has a command to report); its first record is the baseline.
	cb, _, err := hystrix.GetCircuit(command)
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the stream connected and the command's first record read", func() bool {
		s := src.Status()[0]
		return s.Connected && s.Reads > 0
	})
	// The script: 4 successes, failures until the circuit opens, then 3
	// short-circuited calls served by a fallback.
	for range 4 {
		if err := hystrix.Do(command, func() error { return nil }, nil); err != nil {
			t.Fatal(err)
		}
	}
	failures := 0
	eventually.True(t, "the circuit open after scripted failures", func() bool {
		if cb.IsOpen() {
			return true
		}
		failures++
		if err := hystrix.Do(command, func() error { return errScripted }, nil); !errors.Is(err, errScripted) {
			t.Fatalf("a failing call returned %v, want the scripted failure", err)
		}
		return false
	})
	openedReads := src.Status()[0].Reads
	for range 3 {
		err := hystrix.Do(command, func() error { return nil }, func(err error) error {
			if !errors.Is(err, hystrix.ErrCircuitOpen) {
				t.Errorf("fallback called with %v, want hystrix.ErrCircuitOpen", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	dep := func() cbdash.Dependency {
		d, _ := st.Collector.Dependency(cbdash.DependencyKey{Service: "users", Breaker: command})
		return d
	}
	t.Run("an open circuit appears open within two stream intervals", func(t *testing.T) {
		eventually.True(t, "users/GetUser open on the dashboard", func() bool { return dep().State == protocol.StateOpen })
		if n := src.Status()[0].Reads - openedReads; n > 2 {
			t.Errorf("open on the dashboard %d stream intervals after the circuit opened, want at most 2", n)
		}
	})

	t.Run("the dashboard's counts equal the stream's rolling counts", func(t *testing.T) {
		rec := streamRecord(t, srv.URL+"/hystrix.stream", command, func(r map[string]float64) bool {
			return r["rollingCountShortCircuited"] == 3 && r["rollingCountFallbackSuccess"] == 3
		})
		if rec["rollingCountSuccess"] != 4 || int(rec["rollingCountFailure"]) != failures {
			t.Fatalf("stream counts %v; the script made 4 successes and %d failures", rec, failures)
		}
		want := protocol.Counts{Successes: 4, Errors: int64(failures), Failures: int64(failures), Admitted: 4 + int64(failures),
			RejectedOpen: 3, FallbackSuccess: 3}
		eventually.True(t, "the dashboard's counts equal the stream's", func() bool { return dep().Recent == want })
		d := dep()
		trs, err := st.Store.Transitions(context.Background(), cbdash.TransitionQuery{Service: "users", Breaker: command, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(trs) != 1 || trs[0].From != "closed" || trs[0].To != "open" || trs[0].Cause.Kind != protocol.CauseLibraryRule || trs[0].Cause.Threshold != 50 {
			t.Errorf("transitions %+v, want one closed > open by hystrix-go's rule (50%%)", trs)
		}
		if c := d.PerInstance[0].Config; !c.Sampled || !c.HoldsUnsupported || c.MinimumCalls != 5 || c.OpenDurationMillis != 60000 {
			t.Errorf("config %+v, want sampled, holds unsupported, hystrix-go's volume threshold and sleep window", c)
		}
	})

	t.Run("a stopped stream makes the instance stale", func(t *testing.T) {
		stopStream()
		eventually.True(t, "users-1 stale", func() bool { return dep().Stale == 1 })
		eventually.True(t, "the source disconnected, retrying", func() bool {
			s := src.Status()[0]
			return !s.Connected && s.Failures > 0
		})
	})
}
