package web_test

// A fleet of 10,000 dependencies for the live socket's tests and its
// measurement (issue 27, item 4): 20 services of 500 breakers, one
// instance each, each service with its own agent token, reported
// through the ingest API as agents on HTTP do.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

const (
	bigServices = 20  // services s00..s19
	bigBreakers = 500 // breakers b0..b499 of each, on instance i-1
)

// bigFleet is the 10,000 dependencies as the test reports them.
type bigFleet struct {
	h      *harness
	tokens []string // per service
	seq    []uint64 // last batch of each service's instance
	mu     sync.Mutex
	states map[[2]int]string // (service, breaker) -> state, when not closed
}

func bigService(i int) string { return fmt.Sprintf("s%02d", i) }

// newBigFleet declares the fleet: every breaker closed, no calls yet.
func newBigFleet(h *harness) *bigFleet {
	h.t.Helper()
	f := &bigFleet{h: h, seq: make([]uint64, bigServices), states: map[[2]int]string{}}
	for i := range bigServices {
		tok, err := h.st.CreateAgentToken(context.Background(), bigService(i))
		if err != nil {
			h.t.Fatal(err)
		}
		f.tokens = append(f.tokens, tok)
		if err := f.report(i, nil, nil); err != nil {
			h.t.Fatal(err)
		}
	}
	return f
}

// report ingests service i's next batch: windows and transitions.
func (f *bigFleet) report(i int, windows []protocol.Window, transitions []protocol.Transition) error {
	f.mu.Lock()
	f.seq[i]++
	seq := f.seq[i]
	f.mu.Unlock()
	hi := wideHello(bigService(i), "i-1", bigBreakers)
	req := protocol.IngestRequest{Hello: hi, Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: seq, SentAt: f.h.clock.Now().UnixMilli(),
		Windows: windows, Transitions: transitions}}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, _ := http.NewRequest(http.MethodPost, f.h.url+"/api/v1/ingest", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+f.tokens[i])
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("ingest %s seq %d: %d %s", bigService(i), seq, res.StatusCode, raw)
	}
	return nil
}

// windows are a window report for each of service i's breakers from..to-1
// ending now, in its state (closed unless flipped), with calls that differ
// round by round.
func (f *bigFleet) windows(i, from, to, round int) []protocol.Window {
	now := f.h.clock.Now()
	ws := make([]protocol.Window, 0, to-from)
	f.mu.Lock()
	defer f.mu.Unlock()
	for b := from; b < to; b++ {
		ok := int64(40 + (b+round)%50)
		failed := int64((b + round) % 4)
		state := f.states[[2]int{i, b}]
		if state == "" {
			state = protocol.StateClosed
		}
		ws = append(ws, protocol.Window{Breaker: "b" + strconv.Itoa(b), Start: now.Add(-time.Second).UnixMilli(), Millis: 1000,
			State:  state,
			Counts: protocol.Counts{Admitted: ok + failed, Successes: ok, Failures: failed, Errors: failed},
			Headroom: protocol.Headroom{Calls: 100, Failures: failed, FailureRate: float64(failed), FailureRateThreshold: 50,
				MinimumCalls: 10, SlowCallRateThreshold: 80}})
	}
	return ws
}

// flip opens service i's breaker b (a trip), or closes it again when it
// is open (through half-open), now: the transitions to report.
func (f *bigFleet) flip(i, b int) []protocol.Transition {
	at := f.h.clock.Now().UnixMilli()
	name := "b" + strconv.Itoa(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]int{i, b}
	if f.states[k] == protocol.StateOpen {
		delete(f.states, k)
		return []protocol.Transition{
			{Breaker: name, From: protocol.StateOpen, To: protocol.StateHalfOpen, At: at - 1, Cause: protocol.Cause{Kind: protocol.CauseOpenElapsed}},
			{Breaker: name, From: protocol.StateHalfOpen, To: protocol.StateClosed, At: at, Cause: protocol.Cause{Kind: protocol.CauseProbesSucceeded}},
		}
	}
	f.states[k] = protocol.StateOpen
	return []protocol.Transition{{Breaker: name, From: protocol.StateClosed, To: protocol.StateOpen, At: at, OpenMillis: 5000,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, Threshold: 50, WindowCalls: 20, WindowFailed: 11}}}
}

// memory is the process's heap and resident set in bytes: with gc, the
// heap the collection just made finds live (runtime/metrics
// /gc/heap/live:bytes); without, the heap's objects, garbage not yet
// collected included (/memory/classes/heap/objects:bytes). rss is VmRSS
// (0 where /proc is missing).
func memory(gc bool) (heap, rss uint64) {
	name := "/memory/classes/heap/objects:bytes"
	if gc {
		runtime.GC()
		name = "/gc/heap/live:bytes"
	}
	sample := []metrics.Sample{{Name: name}}
	metrics.Read(sample)
	heap = sample[0].Value.Uint64()
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				rss = kb * 1024
			}
		}
	}
	return heap, rss
}

// idleSocket is a /live socket whose client never reads: a raw TCP
// connection that did the websocket handshake by hand. It probes the
// connection with a (masked, empty) ping frame now and then; a probe
// that fails means the server closed it.
type idleSocket struct{ conn net.Conn }

func dialIdle(base, query string, cookies []*http.Cookie) (*idleSocket, error) {
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	var req strings.Builder
	fmt.Fprintf(&req, "GET /live?%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", query, host)
	req.WriteString("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
	for _, c := range cookies {
		fmt.Fprintf(&req, "Cookie: %s=%s\r\n", c.Name, c.Value)
	}
	req.WriteString("\r\n")
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req.String()); err != nil {
		conn.Close()
		return nil, err
	}
	// Read the answer's head a byte at a time: nothing of the first
	// message is read.
	var head []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := conn.Read(one); err != nil {
			conn.Close()
			return nil, fmt.Errorf("handshake: %w (%q)", err, head)
		}
		head = append(head, one[0])
	}
	_ = conn.SetDeadline(time.Time{})
	if status, _, _ := strings.Cut(string(head), "\r\n"); !strings.Contains(status, " 101 ") {
		conn.Close()
		return nil, fmt.Errorf("handshake: %s", status)
	}
	return &idleSocket{conn: conn}, nil
}

// alive probes the connection; false once the server has closed it.
func (s *idleSocket) alive() bool {
	_ = s.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := s.conn.Write([]byte{0x89, 0x80, 1, 2, 3, 4})
	return err == nil
}

// TestMeasureLiveSocketsThatDoNotRead measures, it does not judge: with
// CBDASH_MEASURE_LIVE=1 it reports what 64 /live overview sockets whose
// clients never read (8 sessions x 8, reconnecting when the server
// closes one) cost a server of 10,000 dependencies while every breaker
// reports once a second and a few change state: the heap and resident
// memory before, at their peak over CBDASH_MEASURE_SECONDS (default 30),
// and after a collection at the end (with the sockets still open).
// CBDASH_MEASURE_HEAPPROFILE=path writes heap profiles before (path.before)
// and at the end (path). In-process: the clients are raw
// TCP connections that cost next to nothing. docs/scaling.md has the
// figures.
//
//	CBDASH_MEASURE_LIVE=1 go test -count=1 -run TestMeasureLiveSocketsThatDoNotRead -v ./internal/web/
func TestMeasureLiveSocketsThatDoNotRead(t *testing.T) {
	if os.Getenv("CBDASH_MEASURE_LIVE") == "" {
		t.Skip("a measurement: set CBDASH_MEASURE_LIVE=1 to run it")
	}
	secs := 30
	if v, err := strconv.Atoi(os.Getenv("CBDASH_MEASURE_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	clk := clocktest.NewRunning()
	h := &harness{t: t, clock: clk, users: map[string]string{}, reported: map[string]reported{}}
	h.run(stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.Limits.MaxDependencies = 20000 },
		Web:       func(w *web.Config) { h.cfg = *w }})
	h.addUser("vera", cbdash.RoleViewer, "password-vera")
	f := newBigFleet(h)
	if n := len(h.col.Dependencies()); n != bigServices*bigBreakers {
		t.Fatalf("%d dependencies, want %d", n, bigServices*bigBreakers)
	}

	// Every breaker reports once a second; every 2 s one breaker of a
	// service opens or closes again.
	ctx, stop := context.WithCancel(context.Background())
	var fleetDone sync.WaitGroup
	fleetDone.Add(1)
	go func() {
		defer fleetDone.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for round := 0; ; round++ {
			for i := range bigServices {
				var trs []protocol.Transition
				if round%2 == 0 && i == round/2%bigServices {
					trs = f.flip(i, round/2%bigBreakers)
				}
				ws := f.windows(i, 0, bigBreakers, round)
				if err := f.report(i, ws, trs); err != nil && ctx.Err() == nil {
					t.Errorf("fleet: %v", err)
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { stop(); fleetDone.Wait() }()
	pause(ctx, 10*time.Second) // a measurement: let the fleet's load settle
	heap0, rss0 := memory(true)
	if path := os.Getenv("CBDASH_MEASURE_HEAPPROFILE"); path != "" {
		if out, err := os.Create(path + ".before"); err == nil {
			_ = pprof.WriteHeapProfile(out)
			out.Close()
		}
	}

	var sessions [][]*http.Cookie
	for range 8 {
		c := h.login("vera")
		sessions = append(sessions, c.hc.Jar.Cookies(mustURL(h.url)))
	}
	var reconnects, refused atomic.Int64
	var socks sync.WaitGroup
	for s := range 8 {
		for range 8 {
			socks.Add(1)
			go func() {
				defer socks.Done()
				var sock *idleSocket
				for ctx.Err() == nil {
					if sock == nil {
						var err error
						if sock, err = dialIdle(h.url, "view=overview", sessions[s]); err != nil {
							refused.Add(1)
							sock = nil
							pause(ctx, 200*time.Millisecond)
							continue
						}
					}
					pause(ctx, 500*time.Millisecond)
					if !sock.alive() {
						sock.conn.Close()
						sock = nil
						reconnects.Add(1)
					}
				}
				if sock != nil {
					sock.conn.Close()
				}
			}()
		}
	}
	var peakHeap, peakRSS uint64
	sample := time.NewTicker(time.Second)
	defer sample.Stop()
	for range secs {
		select {
		case <-ctx.Done():
		case <-sample.C:
		}
		heap, rss := memory(false)
		peakHeap, peakRSS = max(peakHeap, heap), max(peakRSS, rss)
	}
	heap1, rss1 := memory(true)
	if path := os.Getenv("CBDASH_MEASURE_HEAPPROFILE"); path != "" {
		if out, err := os.Create(path); err == nil {
			_ = pprof.WriteHeapProfile(out)
			out.Close()
		}
	}
	stop()
	socks.Wait()
	mb := func(b uint64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }
	t.Logf("10,000 dependencies, 64 /live sockets that do not read, %d s (GOMAXPROCS %d):", secs, runtime.GOMAXPROCS(0))
	t.Logf("live heap: before %s, at the end %s (+%s); heap objects at their peak %s", mb(heap0), mb(heap1), mb(max(heap1, heap0)-heap0), mb(peakHeap))
	t.Logf("RSS: before %s, peak %s (+%s), at the end %s", mb(rss0), mb(peakRSS), mb(peakRSS-rss0), mb(rss1))
	t.Logf("sockets closed by the server and opened again: %d; dials refused or failed: %d", reconnects.Load(), refused.Load())
}

// pause waits d of wall time, or until ctx ends: the measurement above
// runs a real fleet for real seconds (it is skipped unless
// CBDASH_MEASURE_LIVE is set), so its pacing is the wall clock's, not a
// wait for an event.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
