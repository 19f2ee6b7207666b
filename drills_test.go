package cbdash

import (
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Stop conditions read as the CLI writes them and write back the same;
// bad ones are refused naming the input.
func TestStopConditionsParseAndWriteBack(t *testing.T) {
	for in, want := range map[string]StopCondition{
		"fallback-failure-rate>20%":   {Metric: StopFallbackFailureRate, Above: 20},
		"error-rate>30% for 10s":      {Metric: StopErrorRate, Above: 30, For: 10 * time.Second},
		"p99>500ms":                   {Metric: StopP99, Above: 500},
		" error-rate > 2.5% for 1m0s": {Metric: StopErrorRate, Above: 2.5, For: time.Minute},
	} {
		got, err := ParseStopCondition(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
			continue
		}
		if back, err := ParseStopCondition(got.String()); err != nil || back != got {
			t.Errorf("%q written as %q reads %+v, %v", in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "fallback-failure-rate", "latency>5%", "error-rate>150%", "error-rate>x%", "p99>5ms for ever", "error-rate>5% for 2h"} {
		if _, err := ParseStopCondition(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
	b := HoldBreach{Condition: StopCondition{Metric: StopFallbackFailureRate, Above: 20}, Value: 86.2,
		At: breakertest.Epoch().Truncate(24 * time.Hour).Add(15*time.Hour + 2*time.Minute + 57*time.Second)}
	if got := b.Reason(); got != "stop condition: fallback failure rate 86.2 % > 20 % at 15:02:57" {
		t.Errorf("reason %q", got)
	}
}

// A hold's stop conditions are the server's defaults less those it drops,
// then its own; dropping one that is not a default is refused.
func TestEffectiveStops(t *testing.T) {
	def := []StopCondition{{Metric: StopFallbackFailureRate, Above: 20}, {Metric: StopErrorRate, Above: 50}}
	own := []StopCondition{{Metric: StopP99, Above: 900}, {Metric: StopErrorRate, Above: 50}}
	got, err := EffectiveStops(def, []string{"fallback-failure-rate>20%"}, own)
	if err != nil || len(got) != 2 || got[0].String() != "error-rate>50%" || got[1].String() != "p99>900ms" {
		t.Errorf("got %v, %v", got, err)
	}
	if got, err := EffectiveStops(def, []string{"*"}, nil); err != nil || len(got) != 0 {
		t.Errorf("drop all: %v, %v", got, err)
	}
	if _, err := EffectiveStops(def, []string{"p99>1ms"}, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("dropping a condition that is no default: %v", err)
	}
}

// Steps read from "5%:1m,25%:2m,100%:5m"; StepAt says which is in force.
func TestSteps(t *testing.T) {
	steps, err := ParseSteps("5%:1m,25%:2m,100%:5m")
	if err != nil || len(steps) != 3 || steps[1] != (HoldStep{Share: 25, For: 2 * time.Minute}) {
		t.Fatalf("%+v, %v", steps, err)
	}
	for d, want := range map[time.Duration]int{0: 1, 59 * time.Second: 1, time.Minute: 2, 3 * time.Minute: 3, time.Hour: 3} {
		if got, _ := StepAt(steps, d); got != want {
			t.Errorf("StepAt(%v) = %d, want %d", d, got, want)
		}
	}
	for _, bad := range []string{"25%:1m,5%:1m", "5%", "0%:1m", "5%:0s", "150%:1m"} {
		if _, err := ParseSteps(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

// A run of fallbacks is counted from window reports that rejected calls
// and ran fallbacks; a report more than FallbackRunGap after the last
// starts a new run; reports without rejections change nothing.
func TestNextFallbackRun(t *testing.T) {
	at := breakertest.Epoch()
	w := func(sec int, served, failed int64) protocol.Window {
		return protocol.Window{Start: at.Add(time.Duration(sec) * time.Second).UnixMilli(), Millis: 1000,
			Counts: protocol.Counts{RejectedForced: served + failed, FallbackSuccess: served, FallbackFailure: failed}}
	}
	var run FallbackRun
	run = NextFallbackRun(run, protocol.Window{Counts: protocol.Counts{Admitted: 5, FallbackSuccess: 5}}) // no rejection
	if !run.LastServed.IsZero() {
		t.Fatalf("a report without rejections started a run: %+v", run)
	}
	run = NextFallbackRun(run, w(0, 8, 2))
	run = NextFallbackRun(run, w(30, 2, 8))
	if run.Served != 10 || run.Failed != 10 || run.SuccessShare != 50 || !run.LastServed.Equal(at.Add(31*time.Second)) {
		t.Fatalf("run %+v", run)
	}
	run = NextFallbackRun(run, w(200, 3, 1))
	if run.Served != 3 || run.Failed != 1 || run.SuccessShare != 75 {
		t.Fatalf("a new run after the gap: %+v", run)
	}
}
