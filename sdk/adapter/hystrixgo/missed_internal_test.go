package hystrixgo

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	metricCollector "github.com/afex/hystrix-go/hystrix/metric_collector"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

type nopRegistrar struct{}

func (nopRegistrar) RegisterSource(agent.Source) error { return nil }

// unpolled is an Adapter whose poll does not run: what the collectors do
// on their own, in the order the test calls them, as hystrix-go would.
func unpolled() *Adapter {
	return &Adapter{reg: nopRegistrar{}, nudge: make(chan struct{}, 1), cmds: map[string]*command{}}
}

func transitions(c *command) (*[]string, func()) {
	var got []string
	cancel := c.Subscribe(func(t breaker.Transition) {
		got = append(got, fmt.Sprintf("%v>%v@%s", t.From, t.To, t.At.UTC().Format("15:04:05")))
	})
	return &got, cancel
}

// An open that closed before the poll confirmed it (an in-flight success
// closes hystrix-go's circuit at once) is reported, open and closed, from
// the short-circuit seen before the Reset, or from a short-circuited call
// reported after the Reset that started before it; a Reset that nothing
// tells of an open (hystrix.Flush) reports nothing, and a short-circuit
// after the Reset only wakes the poll.
func TestAnOpenMissedByThePollIsReportedFromItsShortCircuit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ad := unpolled()
		k := ad.collector("missed").(*collector)
		k.Reset() // hystrix-go creating the circuit
		c := k.c
		got, cancel := transitions(c)
		defer cancel()
		short := func(startedAgo time.Duration) {
			k.Update(metricCollector.MetricResult{Attempts: 1, Errors: 1, ShortCircuits: 1, TotalDuration: startedAgo})
		}

		// 00:00:00 a short-circuit, the poll not yet run; 00:00:01 Reset.
		short(0)
		synctest.Sleep(time.Second)
		k.Reset()
		want := []string{"closed>open@00:00:00", "open>closed@00:00:01"}
		if !slices.Equal(*got, want) {
			t.Fatalf("short-circuit then Reset: %v, want %v", *got, want)
		}

		// 00:00:02 a Reset with nothing seen (the open came and went
		// between two updates), then the short-circuit of a call that
		// started at 00:00:01.5, reported after it.
		synctest.Sleep(time.Second)
		k.Reset()
		if len(*got) != 2 {
			t.Fatalf("a Reset with nothing seen: %v", *got)
		}
		short(1500 * time.Millisecond) // from before the Reset before: left out
		short(500 * time.Millisecond)
		short(time.Second) // another, of the same open: once
		want = append(want, "closed>open@00:00:01", "open>closed@00:00:02")
		if !slices.Equal(*got, want) {
			t.Fatalf("Reset then an older short-circuit: %v, want %v", *got, want)
		}

		// 00:00:03 a short-circuit that started after the Reset: the poll
		// is woken to confirm, nothing reported yet.
		<-ad.nudge // the earlier ones
		synctest.Sleep(time.Second)
		short(0)
		select {
		case <-ad.nudge:
		default:
			t.Error("a short-circuit while closed did not wake the poll")
		}
		if !slices.Equal(*got, want) || c.Snapshot().State != breaker.Closed {
			t.Errorf("a fresh short-circuit: %v, want %v and the poll to confirm it", *got, want)
		}
		if n := c.Snapshot().Totals.RejectedOpen; n != 5 {
			t.Errorf("%d short-circuits counted, want 5", n)
		}
	})
}
