package source_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/source"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ordersStream returns Sources reading stream as orders/orders-1 into
// sink, logging to logs and counting in reg, not yet run.
func ordersStream(t *testing.T, sink source.Sink, clk clock.Clock, stream *scriptedStream, reg *prometheus.Registry, logs *lines) *source.Sources {
	t.Helper()
	src, err := source.New(source.Config{Sink: sink, Clock: clk, Logger: slog.New(logs), Registerer: reg, Targets: []source.Target{{
		Kind: source.KindHystrix, URL: stream.URL + "/hystrix.stream", Service: "orders", Instance: "orders-1",
		Interval: source.Duration(time.Hour),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// goodRecord sends a good record of name and waits until it is read and
// its batch handled.
func goodRecord(t *testing.T, src *source.Sources, stream *scriptedStream, name string, c cmd) {
	t.Helper()
	s := src.Status()[0]
	stream.records <- c.json(name)
	eventually.True(t, "the good record of "+name+" read", func() bool {
		n := src.Status()[0]
		return n.Reads == s.Reads+1 && n.Batches+n.Dropped == s.Batches+s.Dropped+1
	})
}

// An event larger than 1 MiB (an 8 MiB data line, repeated; data lines
// that together pass 1 MiB) is refused on its own and counted as
// too_large: the stream stays open and the good records before and after
// it all reach the dashboard. (The reader used to fail with
// "bufio.Scanner: token too long", dropping the connection every time.)
func TestHystrixStreamSkipsAnOversizedEvent(t *testing.T) {
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.StaleAfter = time.Minute },
		Web:       func(c *web.Config) { c.Anonymous = true }})
	stream := newScriptedStream(t)
	reg, logs := prometheus.NewRegistry(), &lines{}
	src := ordersStream(t, st.Collector, clk, stream, reg, logs)
	runSources(t, src)

	goodRecord(t, src, stream, "GetOrder", cmd{success: 1})
	huge := `{"type":"HystrixCommand","name":"GetOrder","pad":"` + strings.Repeat("x", 8<<20) + `"}`
	for i := range 3 {
		stream.records <- huge
		eventually.True(t, "the 8 MiB event refused", func() bool { return src.Status()[0].Refused == int64(i+1) })
		clk.Advance(100 * time.Millisecond)
		goodRecord(t, src, stream, "GetOrder", cmd{success: 2 + i})
	}
	// Lines each under the limit, together over it.
	stream.records <- strings.Repeat("y", 700<<10) + "\ndata: " + strings.Repeat("y", 700<<10)
	eventually.True(t, "the 1.4 MiB event refused", func() bool { return src.Status()[0].Refused == 4 })
	clk.Advance(100 * time.Millisecond)
	goodRecord(t, src, stream, "ListOrders", cmd{success: 1})

	s := src.Status()[0]
	if s.Failures != 0 || !s.Connected || s.Dropped != 0 || s.Reads != 5 || s.Refused != 4 {
		t.Errorf("status %+v, want 5 reads, 4 refused, connected, no failure, no batch dropped", s)
	}
	if n := len(stream.connections()); n != 1 {
		t.Errorf("%d connections to the stream, want the first one kept", n)
	}
	if got := refused(t, reg); got[source.RefusedTooLarge] != 4 || len(got) != 1 {
		t.Errorf("refused records by reason %v, want too_large 4", got)
	}
	if n := len(logs.all()); n != 1 || logs.count("source: records refused") != 1 {
		t.Errorf("log %q, want one line of refused records", logs.all())
	}
	if msg := logs.attr("source: records refused", "reason"); msg != source.RefusedTooLarge {
		t.Errorf("the line's reason is %q", msg)
	}
	d, ok := dependency(t, st, "orders", "GetOrder")
	// The first record (1 call) is the baseline: the calls after it count.
	if want := (protocol.Counts{Admitted: 3, Successes: 3}); !ok || d.Recent != want {
		t.Errorf("GetOrder counts %+v, want every good record's calls %+v", d.Recent, want)
	}
	if _, ok := dependency(t, st, "orders", "ListOrders"); !ok {
		t.Error("ListOrders, read after the oversized events, is not on the dashboard")
	}
}

// 1,100 new commands appear at once mid-stream: the first ones, up to the
// 1,000 breakers one instance's hello may declare, are taken with the
// records of the commands already known; the records of the commands past
// the limit are refused one by one and counted (too_many_breakers), and
// no batch is lost. (The emitter used to leave them out of the hello and
// send their windows anyway: the collector refused the batch whole, "was
// not declared in hello", good records and all.)
func TestHystrixStreamPastTheBreakersOfAHello(t *testing.T) {
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.StaleAfter = time.Minute },
		Web:       func(c *web.Config) { c.Anonymous = true }})
	stream := newScriptedStream(t)
	reg, logs := prometheus.NewRegistry(), &lines{}
	src := ordersStream(t, st.Collector, clk, stream, reg, logs)
	runSources(t, src)

	goodRecord(t, src, stream, "GetOrder", cmd{success: 1})
	clk.Advance(time.Second)
	const many = 1100
	recs := make([]string, 0, many+1)
	recs = append(recs, cmd{success: 2}.json("GetOrder"))
	for i := range many {
		recs = append(recs, cmd{success: 1}.json(fmt.Sprintf("many%04d", i)))
	}
	stream.records <- strings.Join(recs, "\n\ndata: ") // one write: one tick of the stream
	declared := protocol.MaxBreakersPerHello - 1       // GetOrder has one place
	eventually.True(t, "every record read or refused", func() bool {
		s := src.Status()[0]
		return s.Reads+s.Refused == int64(2+many)
	})
	clk.Advance(time.Second)
	stream.records <- cmd{success: 3}.json("GetOrder") // its batch comes after every other
	eventually.True(t, "GetOrder's third record on the dashboard", func() bool {
		d, ok := dependency(t, st, "orders", "GetOrder")
		return ok && d.Recent.Successes == 2 // the first record (1 call) is the baseline
	})

	s := src.Status()[0]
	if s.Dropped != 0 || s.Reads != int64(3+declared) || s.Refused != int64(many-declared) {
		t.Errorf("status %+v, want %d reads, %d refused, no batch dropped", s, 3+declared, many-declared)
	}
	if got := refused(t, reg); got[source.RefusedTooManyBreakers] != float64(many-declared) || len(got) != 1 {
		t.Errorf("refused records by reason %v, want too_many_breakers %d", got, many-declared)
	}
	if n := logs.count("source: batch not taken"); n != 0 {
		t.Errorf("%d batches not taken: %q", n, logs.all())
	}
	for i := range many {
		name := fmt.Sprintf("many%04d", i)
		if _, ok := dependency(t, st, "orders", name); ok != (i < declared) {
			t.Fatalf("%s on the dashboard: %v, want %v", name, ok, i < declared)
		}
	}
	d, _ := dependency(t, st, "orders", "GetOrder")
	if want := (protocol.Counts{Admitted: 2, Successes: 2}); d.Recent != want {
		t.Errorf("GetOrder counts %+v, want every good record's calls %+v", d.Recent, want)
	}
}

// Sources start beside the collector, which refuses batches until it has
// restored its state: a record read before that waits for it and is
// taken, with no "batch not taken" line. (Every start with --hystrix used
// to log one: "collector is not ready".)
func TestHystrixStreamWaitsForTheCollector(t *testing.T) {
	clk := clocktest.Virtual()
	st := storetest.OpenFile(t, storetest.Path(t), store.Options{Clock: clk})
	col, err := collector.New(collector.Config{Store: st, Clock: clk, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	stream := newScriptedStream(t)
	reg, logs := prometheus.NewRegistry(), &lines{}
	src := ordersStream(t, col, clk, stream, reg, logs)
	runSources(t, src)

	stream.records <- cmd{success: 1}.json("GetOrder")
	eventually.True(t, "the record read", func() bool { return src.Status()[0].Reads == 1 })
	if s := src.Status()[0]; s.Batches != 0 || s.Dropped != 0 {
		t.Fatalf("status %+v before the collector runs, want the batch waiting", s)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- col.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector: %v", err)
		}
	})
	eventually.True(t, "the batch taken", func() bool { return src.Status()[0].Batches == 1 })
	if s := src.Status()[0]; s.Dropped != 0 {
		t.Errorf("status %+v, want no batch dropped", s)
	}
	if n := len(logs.all()); n != 0 {
		t.Errorf("log %q, want nothing", logs.all())
	}
	if _, err := col.Dependency(cbdash.DependencyKey{Service: "orders", Breaker: "GetOrder"}); err != nil {
		t.Errorf("orders/GetOrder: %v", err)
	}
}
