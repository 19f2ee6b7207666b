package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// BenchmarkFleetWideHold is a fleet-wide hold on real parts: a collector
// on a SQLite file in a temp dir behind a loopback HTTP server, 1,000
// instances of service "fleet" connected over websockets (each draining
// what it is sent), and 8 instances of service "other", which no hold
// covers, reconnecting in a loop. Each iteration creates one hold of
// fleet/db (force open, superseding the previous iteration's), covering
// all 1,000 instances.
//
// It reports how long the creation took (create-ms, the mean of the
// iterations) and the hello latency of the uncovered instances that
// began during a creation (hello-p50-ms, hello-p99-ms; hellos is their
// number), and, for comparison, of those that began outside one
// (idle-p50-ms, idle-p99-ms). A hello's latency is from dialing to the
// acknowledgement of the batch sent right after the hello (a duplicate,
// acknowledged without a store write), so it includes everything the
// collector does for a hello before it reads the connection's next
// message.
//
// Run it alone (it is not part of make test):
//
//	go test -run '^$' -bench FleetWideHold -benchtime 3x ./internal/collector/
func BenchmarkFleetWideHold(b *testing.B) {
	const covered, churners = 1000, 8
	h := startHarness(b, "", nil)
	ctx := context.Background()
	// connect dials, says hello as instance of service and, when batch
	// is set, sends batch 1 and reads its acknowledgement.
	connect := func(service, instance string, batch bool) (*websocket.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		conn, _, err := websocket.Dial(dctx, h.wsURL(), &websocket.DialOptions{
			Subprotocols: []string{protocol.Subprotocol},
			HTTPHeader:   http.Header{"Authorization": {"Bearer " + h.token}},
		})
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		conn.SetReadLimit(protocol.MaxMessageBytes)
		if err := benchHello(conn, service, instance); err != nil {
			conn.CloseNow()
			return nil, err
		}
		if batch {
			if err := benchBatch(conn, batchAt(h.now(), 1, 10, 0)); err != nil {
				conn.CloseNow()
				return nil, err
			}
		}
		return conn, nil
	}
	var drains sync.WaitGroup
	conns := make(chan *websocket.Conn, covered)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < covered; i += 16 {
				conn, err := connect("fleet", fmt.Sprintf("f-%04d", i), false)
				if err != nil {
					b.Error(err)
					return
				}
				conns <- conn
			}
		})
	}
	wg.Wait()
	close(conns)
	if b.Failed() {
		b.FailNow()
	}
	for conn := range conns {
		drains.Go(func() {
			for {
				if _, _, err := conn.Read(ctx); err != nil {
					return
				}
			}
		})
		b.Cleanup(func() { conn.CloseNow() })
	}
	// Each uncovered instance stores its batch 1 once; its later
	// connections resend it, a duplicate acknowledged without a write.
	for i := range churners {
		conn, err := connect("other", fmt.Sprintf("u-%d", i), true)
		if err != nil {
			b.Fatal(err)
		}
		_ = conn.Close(websocket.StatusNormalClosure, "")
	}

	type sample struct {
		start time.Time
		lat   time.Duration
	}
	var mu sync.Mutex
	var samples []sample
	stop := make(chan struct{})
	var churn sync.WaitGroup
	for i := range churners {
		churn.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				conn, err := connect("other", fmt.Sprintf("u-%d", i), true)
				if err != nil {
					b.Error(err)
					return
				}
				lat := time.Since(start)
				_ = conn.Close(websocket.StatusNormalClosure, "")
				mu.Lock()
				samples = append(samples, sample{start, lat})
				mu.Unlock()
			}
		})
	}

	type window struct{ from, to time.Time }
	var windows []window
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		req := cbdash.HoldRequest{Selector: cbdash.Selector{Service: "fleet", Breaker: "db"},
			Action: protocol.ActionForceOpen, TTL: time.Hour, Reason: fmt.Sprintf("fleet-wide drill %d", i)}
		from := time.Now()
		hold, err := h.col.CreateHold(ctx, cbdash.Actor{Name: "bench"}, req)
		to := time.Now()
		if err != nil {
			b.Fatalf("create hold: %v", err)
		}
		if n := len(hold.Coverage); n != covered {
			b.Fatalf("the hold covers %d instance breakers, want %d", n, covered)
		}
		windows = append(windows, window{from, to})
		total += to.Sub(from)
	}
	b.StopTimer()
	close(stop)
	churn.Wait()

	var during, idle []time.Duration
	for _, s := range samples {
		in := false
		for _, w := range windows {
			if !s.start.Before(w.from) && s.start.Before(w.to) {
				in = true
				break
			}
		}
		if in {
			during = append(during, s.lat)
		} else {
			idle = append(idle, s.lat)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(total)/float64(b.N), "create-ms")
	b.ReportMetric(float64(len(during)), "hellos")
	b.ReportMetric(ms(nearestRank(during, 0.50)), "hello-p50-ms")
	b.ReportMetric(ms(nearestRank(during, 0.99)), "hello-p99-ms")
	b.ReportMetric(ms(nearestRank(idle, 0.50)), "idle-p50-ms")
	b.ReportMetric(ms(nearestRank(idle, 0.99)), "idle-p99-ms")
	h.stop()
	drains.Wait()
}

// nearestRank is the q-quantile (0..1) of ds by the nearest rank; 0 when ds
// is empty.
func nearestRank(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// benchHello says hello as one process of instance of service, with one
// breaker "db", and reads the welcome.
func benchHello(conn *websocket.Conn, service, instance string) error {
	hello := rawHello(instance, 1)
	hello.Service = service
	hello.Breakers = hello.Breakers[:1]
	if err := benchWrite(conn, hello); err != nil {
		return err
	}
	typ, err := benchRead(conn, "")
	if err == nil && typ != protocol.TypeWelcome {
		err = fmt.Errorf("%s/%s: got %s, want a welcome", service, instance, typ)
	}
	return err
}

// benchBatch sends batch and reads up to its acknowledgement.
func benchBatch(conn *websocket.Conn, batch protocol.Batch) error {
	if err := benchWrite(conn, batch); err != nil {
		return err
	}
	_, err := benchRead(conn, protocol.TypeAck)
	return err
}

func benchWrite(conn *websocket.Conn, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return conn.Write(ctx, websocket.MessageText, data)
}

// benchRead reads messages until one of type typ ("" = the next one) and
// returns its type.
func benchRead(conn *websocket.Conn, typ string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return "", fmt.Errorf("read: %w", err)
		}
		var env protocol.Envelope
		if err := json.Unmarshal(data, &env); err != nil {
			return "", fmt.Errorf("collector sent non-JSON %q", data)
		}
		if env.Type == protocol.TypeError {
			return "", fmt.Errorf("collector sent an error: %s", data)
		}
		if typ == "" || env.Type == typ {
			return env.Type, nil
		}
	}
}
