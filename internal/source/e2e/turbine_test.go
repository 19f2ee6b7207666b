package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	_ "unsafe" // go:linkname, below

	"github.com/afex/hystrix-go/hystrix"

	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// turbine merges the Hystrix streams of a cluster's hosts into one, as
// Netflix Turbine does:
//
//   - v1 (com.netflix.turbine.data.AggDataFromCluster, which Spring Cloud
//     Netflix Turbine runs): each host's last record of a command is
//     kept; the merged record sums every integer over the hosts (settings
//     included: a threshold of 50 on two hosts is 100), keeps any other
//     value as a string, one the hosts agree on as itself ("false") and
//     one they do not as its values' counts of hosts, quotes removed:
//     "{false:1,true:1}". Booleans are strings.
//   - v2 (com.netflix.turbine.aggregator.StreamAggregator): numbers are
//     summed except the settings (propertyValue_*) and currentTime (left
//     out); every other value is the one the hosts agree on (true and
//     false as booleans, others as strings: "50") or an object of its
//     values' counts of hosts: {"false":1,"true":1}.
//
// Both write reportingHosts, the sum of each host's 1. A merged record is
// written after each host's record, to every subscriber.
type turbine struct {
	v2 bool

	mu    sync.Mutex
	last  map[string]map[string]map[string]any // command, host: the host's last record
	order []string                             // hosts
	subs  map[chan []byte]bool
}

// follow reads a host's stream (from its handler, in process), taking the
// records of command as the host's records of name.
func (tb *turbine) follow(ctx context.Context, host string, h http.Handler, command, name string) {
	tb.mu.Lock()
	tb.order = append(tb.order, host)
	tb.mu.Unlock()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/hystrix.stream", nil)
	resp, err := (&http.Client{Transport: handlerTransport{h}}).Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var rec map[string]any
		d := json.NewDecoder(strings.NewReader(data))
		d.UseNumber()
		if d.Decode(&rec) != nil || rec["type"] != "HystrixCommand" || rec["name"] != command {
			continue
		}
		rec["name"], rec["group"] = name, name
		tb.update(name, host, rec)
	}
}

func (tb *turbine) update(name, host string, rec map[string]any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.last == nil {
		tb.last = map[string]map[string]map[string]any{}
	}
	if tb.last[name] == nil {
		tb.last[name] = map[string]map[string]any{}
	}
	tb.last[name][host] = rec
	b, err := json.Marshal(tb.merged(tb.last[name]))
	if err != nil {
		panic(err)
	}
	msg := append(append([]byte("data: "), b...), '\n', '\n')
	for ch := range tb.subs {
		select {
		case ch <- msg:
		default:
		}
	}
}

// merged is the merged record of the hosts' last records.
func (tb *turbine) merged(hosts map[string]map[string]any) map[string]any {
	keys := map[string]bool{}
	for _, rec := range hosts {
		for k := range rec {
			keys[k] = true
		}
	}
	out := map[string]any{}
	for k := range keys {
		var nums []json.Number
		var others []string
		var maps []map[string]any
		for _, rec := range hosts {
			switch v := rec[k].(type) {
			case json.Number:
				nums = append(nums, v)
			case map[string]any:
				maps = append(maps, v)
			case nil:
			default:
				others = append(others, fmt.Sprint(v))
			}
		}
		switch {
		case k == "name" || k == "type" || k == "group":
			out[k] = others[0]
		case len(maps) > 0: // latency percentiles: summed
			sum := map[string]int64{}
			for _, m := range maps {
				for mk, mv := range m {
					n, _ := mv.(json.Number).Int64()
					sum[mk] += n
				}
			}
			out[k] = sum
		case len(nums) > 0 && tb.v2 && (k == "currentTime"):
		case len(nums) > 0 && !(tb.v2 && strings.HasPrefix(k, "propertyValue_")):
			var sum int64
			for _, n := range nums {
				v, err := n.Int64()
				if err != nil { // not an integer: Turbine 1.x keeps it a string
					others = append(others, n.String())
					continue
				}
				sum += v
			}
			if len(others) == 0 {
				out[k] = sum
				continue
			}
			fallthrough
		default:
			for _, n := range nums {
				others = append(others, n.String())
			}
			out[k] = tb.strings(others)
		}
	}
	return out
}

// strings is the merged value of the hosts' values that are not summed.
func (tb *turbine) strings(vals []string) any {
	counts := map[string]int{}
	for _, v := range vals {
		counts[v]++
	}
	if len(counts) == 1 {
		v := vals[0]
		if tb.v2 && (v == "true" || v == "false") {
			return v == "true"
		}
		return v
	}
	if tb.v2 {
		return counts
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, counts[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// ServeHTTP is the merged stream.
func (tb *turbine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch := make(chan []byte, 64)
	tb.mu.Lock()
	if tb.subs == nil {
		tb.subs = map[chan []byte]bool{}
	}
	tb.subs[ch] = true
	tb.mu.Unlock()
	defer func() {
		tb.mu.Lock()
		delete(tb.subs, ch)
		tb.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case msg := <-ch:
			if _, err := w.Write(msg); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
}

// circuitBreakersMutex guards hystrix-go's circuits; each StreamHandler
// reads them under it.
//
//go:linkname circuitBreakersMutex github.com/afex/hystrix-go/hystrix.circuitBreakersMutex
var circuitBreakersMutex *sync.RWMutex

// apartHandlers orders the publishing of two StreamHandlers of one
// process, which hystrix-go does not: each computes the latency
// percentiles of every circuit, and rolling.Timing.SortedDurations reads
// its cache without a lock while another writes it (a race of
// hystrix-go's, of two handlers, which hosts of their own do not share).
// Taking the circuits' lock for writing between the two handlers' ticks
// puts one's reads before the other's. It runs until ctx ends.
func apartHandlers(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			circuitBreakersMutex.Lock()
			circuitBreakersMutex.Unlock() // empty: the ordering is the point
		}
	}
}

// Two real hystrix-go hosts of a command (in this process, as two
// commands each with its own StreamHandler, started at different phases
// of the second), merged by a Turbine that sums as Turbine 1.x or 2 does,
// read by cbdash's source as one target. Host a's dependency fails for
// 30 s while b's does not. The source reads the cluster: its settings are
// one host's (threshold 50%, not 100%), the cluster is open while a is,
// "open on 1 of 2 hosts", and the counts add up to the two hosts' own.
func TestTurbineClusterOfHystrixGoHosts(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "Turbine 1.x", true: "Turbine 2"}[v2], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { turbineRun(t, v2) })
		})
	}
}

func turbineRun(t *testing.T, v2 bool) {
	countTotals()
	const name = "GetUser"
	hosts := []string{"users-a", "users-b"}
	command := func(h string) string { return fmt.Sprintf("%s@%s-%v", name, h, v2) }
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	tb := &turbine{v2: v2}
	var handlers []*hystrix.StreamHandler
	var followers sync.WaitGroup
	// The hosts' handlers tick at 0.2 s and 0.65 s into each second; the
	// circuits' lock is taken at 0.1, 0.35, 0.6 and 0.85.
	bubbletest.Advance(100 * time.Millisecond)
	followers.Go(func() { apartHandlers(ctx, 250*time.Millisecond) })
	for i, h := range hosts {
		hystrix.ConfigureCommand(command(h), hystrix.CommandConfig{Timeout: 1000, MaxConcurrentRequests: 100,
			RequestVolumeThreshold: 20, SleepWindow: 5000, ErrorPercentThreshold: 50})
		if _, _, err := hystrix.GetCircuit(command(h)); err != nil {
			t.Fatal(err)
		}
		bubbletest.Advance(time.Until(start.Add(time.Duration(200+450*i) * time.Millisecond)))
		sh := hystrix.NewStreamHandler()
		sh.Start()
		handlers = append(handlers, sh)
		followers.Go(func() { tb.follow(ctx, h, sh, command(h), name) })
	}
	sink := &recordingSink{}
	src, err := source.New(source.Config{Sink: sink, Client: &http.Client{Transport: handlerTransport{tb}}, Targets: []source.Target{{
		Kind: source.KindHystrix, URL: "http://turbine.test/turbine.stream?cluster=users", Service: "users", Instance: "cluster",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()

	// 20 calls a second on each host, from 3 s to 183 s; host a's fail
	// from 60 s to 90 s, one in ten of both hosts' otherwise.
	const (
		from, to   = 3 * time.Second, 183 * time.Second
		downA, upA = 60 * time.Second, 90 * time.Second
		every      = 50 * time.Millisecond
		hostA      = 0
	)
	i := 0
	for at := from; at < to; at += every {
		bubbletest.Advance(time.Until(start.Add(at)))
		for hi, h := range hosts {
			fail := i%10 == 9 || (hi == hostA && at >= downA && at < upA)
			_ = hystrix.Do(command(h), func() error {
				if fail {
					return errDown
				}
				return nil
			}, func(error) error { return nil })
		}
		i++
	}
	bubbletest.Advance(15 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("source: %v", err)
	}
	for _, sh := range handlers {
		sh.Stop()
	}
	followers.Wait()
	var lib protocol.Counts
	for _, h := range hosts {
		c, _ := totalsOf(command(h)).get()
		lib.Add(c)
	}
	endCircuits(t, command(hosts[0]), command(hosts[1]))
	synctest.Wait()

	ws := sink.of(name)
	if len(ws) == 0 {
		t.Fatal("no window of the cluster")
	}
	// Settings: one host's.
	sink.mu.Lock()
	hello := sink.hellos[len(sink.hellos)-1]
	sink.mu.Unlock()
	var cfg protocol.BreakerConfig
	for _, b := range hello.Breakers {
		if b.Name == name {
			cfg = b
		}
	}
	if cfg.FailureRateThreshold != 50 || cfg.MinimumCalls != 20 || cfg.OpenDurationMillis != 5000 || !cfg.Estimated {
		t.Errorf("the cluster's configuration %+v, want one host's: threshold 50%%, volume 20, sleep window 5000 ms, estimated counts", cfg)
	}
	// State: open on 1 of 2 hosts while a is down, closed on both after.
	var openOne, closedAfter bool
	for _, w := range ws {
		at := time.UnixMilli(w.Start + w.Millis).Sub(start)
		if at < 3*time.Second {
			continue // before both hosts reported
		}
		if w.Hosts == nil || w.Hosts.Total != 2 {
			t.Fatalf("a window of the cluster %v into the run: %+v, want 2 hosts", at, w)
		}
		switch {
		case at > downA+5*time.Second && at < upA:
			if w.State != protocol.StateOpen || w.Hosts.Open != 1 {
				t.Errorf("%v into the run (host a down): state %s, %d of 2 hosts open; want open on 1 of 2", at, w.State, w.Hosts.Open)
			} else {
				openOne = true
			}
			if w.Headroom.FailureRateThreshold != 50 {
				t.Errorf("%v into the run: threshold %v, want 50", at, w.Headroom.FailureRateThreshold)
			}
		case at > upA+20*time.Second:
			if w.State != protocol.StateClosed || w.Hosts.Open != 0 {
				t.Errorf("%v into the run (both up): state %s, %d of 2 hosts open; want closed", at, w.State, w.Hosts.Open)
			} else {
				closedAfter = true
			}
		}
	}
	if !openOne || !closedAfter {
		t.Errorf("the cluster was never open on 1 of 2 hosts (%v) or closed after (%v)", openOne, closedAfter)
	}
	// Counts: the two hosts' sums.
	var got protocol.Counts
	for _, w := range ws {
		got.Add(w.Counts)
	}
	for _, f := range []struct {
		name     string
		got, lib int64
	}{{"successes", got.Successes, lib.Successes}, {"failures", got.Errors, lib.Errors},
		{"short-circuited", got.RejectedOpen, lib.RejectedOpen}, {"fallback successes", got.FallbackSuccess, lib.FallbackSuccess}} {
		off := float64(f.got-f.lib) / float64(max(f.lib, 1))
		t.Logf("%s: %d read, the hosts' own %d (%+.2f%%)", f.name, f.got, f.lib, 100*off)
		if math.Abs(off) > 0.02 {
			t.Errorf("%s: %d read from Turbine, the two hosts counted %d (%+.2f%%), want within 2%%", f.name, f.got, f.lib, 100*off)
		}
	}
}
