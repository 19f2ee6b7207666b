package collector

import (
	"reflect"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/live/linetest"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestPublishedLinesSurviveThePipeline: views taken from the collector
// keep every value of their lines while, through the real websocket and
// HTTP ingest paths, an agent says hello again on its connection with one
// breaker's configuration changed (the other unchanged), an HTTP agent
// posts under a changed hello, and an agent ten minutes ahead has its
// batches' times corrected (a copy of the batch). Drift is told by value.
func TestPublishedLinesSurviveThePipeline(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewRunning()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	started := clocktest.Epoch().Add(-time.Hour).UnixMilli()
	ws, ahead := dialRaw(t, h, h.token), dialRaw(t, h, h.token)
	ws.hello("ws", started)
	ahead.hello("ahead", started)
	web := newHTTPAgent(t, h, rawHello("http", started))

	view := func(breaker string) cbdash.Dependency {
		t.Helper()
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "api", Breaker: breaker})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	line := func(d cbdash.Dependency, inst string) *cbdash.InstanceBreaker { return linetest.Of(t, &d, inst) }

	sent := h.batch(1, 7, 1)
	ws.send(sent)
	ahead.send(skewedBatch(clk.Now(), 10*time.Minute, 1, 9))
	web.ingest()
	eventually.True(t, "every instance's first window applied", func() bool {
		d := view("db")
		return len(d.PerInstance) == 3 && line(d, "ws").Last.Counts.Admitted == 7 && line(d, "ahead").Last.Counts.Admitted == 9 && line(d, "http").Last.Counts.Admitted == 3
	})
	firstDB, firstCache := view("db"), view("cache")
	wantDB, wantCache := linetest.DeepCopies(firstDB.PerInstance), linetest.DeepCopies(firstCache.PerInstance)
	if skew := line(firstDB, "ahead").Last.Start - clk.Now().UnixMilli(); skew > time.Minute.Milliseconds() {
		t.Fatalf("ahead's window starts %d ms after now: not corrected", skew)
	}
	for _, inst := range []string{"ws", "ahead", "http"} {
		if line(firstDB, inst).ConfigDiffers {
			t.Fatalf("%s differs with equal configurations from three hellos", inst)
		}
	}

	// ws changes db's threshold on its connection; cache stays as it was.
	again := rawHello("ws", started)
	again.Breakers[0].FailureRateThreshold = 25
	ws.send(again)
	ws.send(h.batch(2, 11, 0))
	ahead.send(skewedBatch(clk.Now(), 10*time.Minute, 2, 13))
	web.hello.Breakers = append([]protocol.BreakerConfig(nil), web.hello.Breakers...)
	web.hello.Breakers[1].MinimumCalls = 99 // http's cache changes
	web.ingest()
	eventually.True(t, "the second round applied", func() bool {
		d, c := view("db"), view("cache")
		return line(d, "ws").Config.FailureRateThreshold == 25 && line(d, "ws").Last.Counts.Admitted == 11 &&
			line(d, "ahead").Last.Counts.Admitted == 13 && line(c, "http").Config.MinimumCalls == 99
	})
	// Every batch stored (ws: acked; http: answered), and the first view's
	// windows are still the ones sent: neither the saver nor the store
	// wrote into a batch live state points at.
	for {
		var a protocol.Ack
		ws.expect(protocol.TypeAck, &a)
		if a.Seq == 2 {
			break
		}
	}
	if got := *line(firstDB, "ws").Last; !reflect.DeepEqual(got, sent.Windows[0]) {
		t.Errorf("ws's first window\n got %+v\nwant %+v", got, sent.Windows[0])
	}
	webSent := h.batch(1, 3, 0).Windows[0]
	webSent.Start = line(firstDB, "http").Last.Start
	if got := *line(firstDB, "http").Last; !reflect.DeepEqual(got, webSent) {
		t.Errorf("http's first window\n got %+v\nwant %+v", got, webSent)
	}
	linetest.Unchanged(t, "the first db view", firstDB.PerInstance, wantDB)
	linetest.Unchanged(t, "the first cache view", firstCache.PerInstance, wantCache)

	db, cache := view("db"), view("cache")
	for inst, want := range map[string]bool{"ws": true, "ahead": false, "http": false} {
		if got := line(db, inst).ConfigDiffers; got != want {
			t.Errorf("db of %s: config_differs %v, want %v", inst, got, want)
		}
	}
	for inst, want := range map[string]bool{"ws": false, "ahead": false, "http": true} {
		if got := line(cache, inst).ConfigDiffers; got != want {
			t.Errorf("cache of %s: config_differs %v, want %v", inst, got, want)
		}
	}
	if got := *line(cache, "ws").Config; got != rawHello("ws", started).Breakers[1] {
		t.Errorf("ws's cache configuration after its second hello: %+v", got)
	}
}
