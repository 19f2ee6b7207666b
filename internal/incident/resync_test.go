package incident_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// stallingStore is the real store whose first CreateIncident waits for
// release: the service consuming the live feed stalls meanwhile.
type stallingStore struct {
	*store.Store
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *stallingStore) CreateIncident(ctx context.Context, inc cbdash.Incident) (int64, error) {
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
	return s.Store.CreateIncident(ctx, inc)
}

// logRecorder keeps the level and message of every log record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

func (l *logRecorder) count(level slog.Level, msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level >= level && strings.Contains(r.Message, msg) {
			n++
		}
	}
	return n
}

// TestServiceDroppedByABurstLosesNoIncident stalls the incident service
// (its store) while a burst of transitions goes through the real collector,
// more than the subscriber's buffer: the collector drops it. Meanwhile one
// dependency's incident gains an instance, another dependency trips, and a
// third trips and closes again. Once the store answers, the service
// subscribes again and the snapshot gives it all three, without an error
// logged.
func TestServiceDroppedByABurstLosesNoIncident(t *testing.T) {
	stack := stacktest.Start(t, stacktest.Options{Collector: func(c *collector.Config) { c.SubscriberBuffer = 8 }})
	col, clk := stack.Collector, stack.Clock
	st := &stallingStore{Store: stack.Store, entered: make(chan struct{}), release: make(chan struct{})}
	logs := &logRecorder{}
	svc, err := incident.NewService(incident.ServiceConfig{Source: col, Store: st, Clock: clk, Tick: 50 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	breakers := []string{"payments", "ledger", "search"}
	cfg := func(name string) protocol.BreakerConfig {
		return protocol.BreakerConfig{Name: name, WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}
	}
	type agent struct {
		hello protocol.Hello
		seq   uint64
	}
	agents := map[string]*agent{}
	for _, inst := range []string{"i0", "i1"} {
		h := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: inst, SDKVersion: "test", StartedAt: clk.Now().UnixMilli()}
		for _, b := range breakers {
			h.Breakers = append(h.Breakers, cfg(b))
		}
		agents[inst] = &agent{hello: h}
	}
	gen := uint64(0)
	send := func(inst string, ts ...protocol.Transition) {
		t.Helper()
		a := agents[inst]
		a.seq++
		now := clk.Now().UnixMilli()
		b := protocol.Batch{Type: protocol.TypeBatch, Seq: a.seq, SentAt: now, Transitions: ts}
		for _, name := range breakers {
			state := protocol.StateClosed
			for _, tr := range ts {
				if tr.Breaker == name {
					state = tr.To
				}
			}
			b.Windows = append(b.Windows, protocol.Window{Breaker: name, Start: now - 1000, Millis: 1000, State: state, Counts: protocol.Counts{Admitted: 10, Successes: 10}})
		}
		if _, err := col.Ingest(context.Background(), &a.hello, &b); err != nil {
			t.Fatalf("ingest %s seq %d: %v", inst, a.seq, err)
		}
	}
	trans := func(breaker, from, to string) protocol.Transition {
		gen++
		cause := protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50}
		if to == protocol.StateHalfOpen {
			cause = protocol.Cause{Kind: protocol.CauseOpenElapsed}
		}
		return protocol.Transition{Breaker: breaker, From: from, To: to, At: clk.Now().UnixMilli(), Generation: gen, Cause: cause}
	}
	send("i0")
	send("i1")
	eventually.True(t, "both instances live", func() bool {
		d, err := col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		return err == nil && d.Instances == 2
	})

	// i0's payments breaker trips: the service stalls storing the incident.
	send("i0", trans("payments", protocol.StateClosed, protocol.StateOpen))
	<-st.entered
	// The burst: i0 flaps (20 transitions), i1's payments trips, ledger
	// trips on i0, search trips and closes on i1.
	for range 10 {
		send("i0", trans("payments", protocol.StateOpen, protocol.StateHalfOpen), trans("payments", protocol.StateHalfOpen, protocol.StateOpen))
	}
	send("i1", trans("payments", protocol.StateClosed, protocol.StateOpen))
	send("i0", trans("ledger", protocol.StateClosed, protocol.StateOpen))
	send("i1", trans("search", protocol.StateClosed, protocol.StateOpen), trans("search", protocol.StateOpen, protocol.StateHalfOpen), trans("search", protocol.StateHalfOpen, protocol.StateClosed))
	close(st.release)

	eventually.True(t, "the service subscribes again", func() bool {
		return logs.count(slog.LevelWarn, "live feed dropped us") > 0
	})
	byBreaker := func() map[string]cbdash.Incident {
		l, err := st.Incidents(context.Background(), cbdash.IncidentQuery{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]cbdash.Incident{}
		for _, inc := range l {
			m[inc.Breaker] = inc
		}
		return m
	}
	eventually.True(t, "an incident on each of the three dependencies, payments with both instances", func() bool {
		m := byBreaker()
		return len(m) == 3 && slices.Equal(m["payments"].Instances, []string{"i0", "i1"})
	})
	m := byBreaker()
	if !m["payments"].Open || !m["ledger"].Open || !slices.Equal(m["ledger"].Instances, []string{"i0"}) || !slices.Equal(m["search"].Instances, []string{"i1"}) {
		t.Fatalf("incidents %+v", m)
	}
	if n := logs.count(slog.LevelError, ""); n != 0 {
		t.Fatalf("%d errors logged: %+v", n, logs.recs)
	}
}
