package incident_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestDrillIsNotTheFirstTrip: a drill forces instance a open at +10 s
// (forced states do not start incidents by default); b trips for real at
// +21.5 s. The incident the Service stores in the real store starts at
// b's trip, names b and its failure rate as the first trip, and holds a
// (down, so it extends the incident); the export's "First trip" row says
// so. Before the fix the incident started at +10 s with a's "operator
// command force open" as its first trip (finding 6 of the demo trial).
func TestDrillIsNotTheFirstTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		f := &feed{ch: make(chan cbdash.Event)}
		svc, err := incident.NewService(incident.ServiceConfig{Source: f, Store: st, Tick: time.Hour, Clock: clocktest.NewRunning()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		prev := map[string]string{}
		trip := step{at: 21, tr: "b:open"}.event(prev)
		trip.Transition.At += 500 // 21.5 s
		for _, ev := range []cbdash.Event{step{at: 10, tr: "a:forced_open"}.event(prev), trip} {
			f.ch <- ev
		}
		bubbletest.Settle()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		l, err := st.Incidents(context.Background(), cbdash.IncidentQuery{})
		if err != nil || len(l) != 1 {
			t.Fatalf("incidents = %+v (%v), want one", l, err)
		}
		inc := l[0]
		if want := t0.Add(21500 * time.Millisecond); !inc.Start.Equal(want) || inc.FirstInstance != "b" || inc.FirstCause.Kind != protocol.CauseFailureRate {
			t.Errorf("incident starts %v at %s (%s), want %v at b (failure_rate)", inc.Start.Sub(t0), inc.FirstInstance, inc.FirstCause.Kind, want.Sub(t0))
		}
		if strings.Join(inc.Instances, ",") != "a,b" || inc.Opens != 1 {
			t.Errorf("instances %v, opens %d; want a,b (the drill's instance extends it) and 1 open", inc.Instances, inc.Opens)
		}
		rep, err := incident.Build(context.Background(), st, inc, t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		md := string(incident.Markdown(rep))
		if !strings.Contains(md, "| First trip | b: failure rate 60.0%") || strings.Contains(md, "force open") {
			t.Errorf("export:\n%s\nwant the first trip b's failure rate, no drill", md)
		}
	})
}
