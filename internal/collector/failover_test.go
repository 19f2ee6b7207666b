package collector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/prometheus/client_golang/prometheus"
)

// node is one of several collectors over one store (what several
// collectors over one database look like), behind a listener that can be
// killed: kill cuts every TCP connection it accepted, without a websocket
// closing handshake, and closes it, as when the process dies.
type node struct {
	col    *Collector
	srv    *httptest.Server
	ln     *cutListener
	cancel context.CancelFunc
	done   chan error
}

func startNode(t *testing.T, st *store.Store, clk clock.Clock) *node {
	t.Helper()
	col, err := New(Config{Store: st, Clock: clk, Registerer: prometheus.NewRegistry(), PublishInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{col: col, ln: &cutListener{Listener: inner, conns: map[net.Conn]struct{}{}}, done: make(chan error, 1)}
	n.srv = httptest.NewUnstartedServer(testMux(col))
	n.srv.Listener.Close()
	n.srv.Listener = n.ln
	n.srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- col.Run(ctx) }()
	eventually.True(t, "collector ready", col.ing.Accepting)
	t.Cleanup(func() {
		n.kill()
		cancel()
		if err := <-n.done; err != nil {
			t.Errorf("run: %v", err)
		}
		n.srv.Close()
	})
	return n
}

func (n *node) wsURL() string { return "ws" + strings.TrimPrefix(n.srv.URL, "http") + "/api/v1/agent" }

func (n *node) kill() { n.ln.cut() }

type cutListener struct {
	net.Listener
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (l *cutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[c] = struct{}{}
	return c, nil
}

func (l *cutListener) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	_ = l.Listener.Close()
	for c := range l.conns {
		_ = c.Close()
	}
	clear(l.conns)
}

// TestAgentsFailOverToAnotherCollectorOverTheSameStore: a fleet given two
// collectors' URLs splits across them; one collector is killed while the
// breakers are being called; its agents move to the other within a few
// seconds, and at the end the store holds exactly what every breaker
// counted: nothing acked was lost, nothing resent was stored twice.
func TestAgentsFailOverToAnotherCollectorOverTheSameStore(t *testing.T) {
	clk := clocktest.NewRunning()
	st := storetest.OpenFile(t, storetest.Path(t), store.Options{Clock: clk})
	nodes := []*node{startNode(t, st, clk), startNode(t, st, clk)}
	token, err := st.CreateAgentToken(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	urls := []string{nodes[0].wsURL(), nodes[1].wsURL()}

	type member struct {
		ag *agent.Agent
		br *breaker.Breaker
	}
	var fleet []member
	for i := range 6 {
		br, err := breaker.New("db", breaker.Config{MinimumCalls: 1000, Clock: breakertest.NewClock(clk.Now())})
		if err != nil {
			t.Fatal(err)
		}
		ag, err := agent.New(agent.Config{
			URLs: urls, Token: token, Service: "api", Instance: fmt.Sprintf("f%d", i),
			ReportInterval: 20 * time.Millisecond, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
			Clock: clk,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ag.Register(br); err != nil {
			t.Fatal(err)
		}
		if err := ag.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ag.Close(context.Background()) })
		fleet = append(fleet, member{ag, br})
	}
	on := func(url string) int {
		n := 0
		for _, m := range fleet {
			if m.ag.Stats().Collector == url {
				n++
			}
		}
		return n
	}
	eventually.True(t, "every agent connected", func() bool { return on(urls[0])+on(urls[1]) == len(fleet) })
	if on(urls[0]) == 0 || on(urls[1]) == 0 {
		t.Fatalf("the fleet did not split: %d on the first collector, %d on the second", on(urls[0]), on(urls[1]))
	}
	t.Logf("%d agents on the first collector, %d on the second", on(urls[0]), on(urls[1]))

	// Call every breaker until told to stop: one call in four fails.
	stop := make(chan struct{})
	var calls atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		boom := errors.New("boom")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, m := range fleet {
				_ = m.br.Execute(context.Background(), func(context.Context) error {
					if i%4 == 0 {
						return boom
					}
					return nil
				})
			}
			calls.Add(1)
			if i%50 == 0 {
				runtime.Gosched() // let the agents' goroutines run between bursts of calls
			}
		}
	}()
	eventually.True(t, "batches acknowledged on both collectors", func() bool {
		for _, m := range fleet {
			if m.ag.Stats().Acked < 3 {
				return false
			}
		}
		return true
	})
	killedAt := time.Now() // real time: backoff, dial and handshake run on real time
	nodes[0].kill()
	eventually.True(t, "every agent on the surviving collector", func() bool { return on(urls[1]) == len(fleet) })
	took := time.Since(killedAt)
	t.Logf("every agent failed over in %v (real time)", took)
	if took > 5*time.Second {
		t.Fatalf("failover took %v", took)
	}
	acked := make([]uint64, len(fleet))
	for i, m := range fleet {
		acked[i] = m.ag.Stats().Acked
	}
	eventually.True(t, "batches acknowledged after the failover", func() bool {
		for i, m := range fleet {
			if m.ag.Stats().Acked < acked[i]+3 {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	for _, m := range fleet {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := m.ag.Close(ctx)
		cancel()
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	var want breaker.Totals
	for _, m := range fleet {
		tot := m.br.Snapshot().Totals
		want.Admitted += tot.Admitted
		want.Failures += tot.Failures
	}
	pts, err := st.History(context.Background(), cbdash.HistoryQuery{
		DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From:          clk.Now().Add(-time.Hour), To: clk.Now().Add(time.Hour), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var admitted, failures int64
	for _, p := range pts {
		admitted += p.Counts.Admitted
		failures += p.Counts.Failures
	}
	if uint64(admitted) != want.Admitted || uint64(failures) != want.Failures {
		t.Fatalf("stored admitted %d failures %d; the breakers counted %d and %d", admitted, failures, want.Admitted, want.Failures)
	}
	t.Logf("%d rounds of calls over %d breakers: %d calls stored once each", calls.Load(), len(fleet), admitted)
}
