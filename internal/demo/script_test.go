package demo

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestScriptValidate(t *testing.T) {
	ok := Phase{Name: "ok", Duration: time.Second}
	tests := []struct {
		name   string
		script Script
		want   string // "" = valid
	}{
		{"default script is valid", DefaultScript(), ""},
		{"no phases", Script{}, "no phases"},
		{"zero duration", Script{Phases: []Phase{ok, {Name: "zero"}}}, "phases[1] (zero).Duration"},
		{"error rate above 1", Script{Phases: []Phase{{Name: "x", Duration: 1, Fault: Fault{ErrorRate: 1.5}}}}, "ErrorRate"},
		{"negative business rate", Script{Phases: []Phase{{Name: "x", Duration: 1, Fault: Fault{BusinessRate: -0.1}}}}, "BusinessRate"},
		{"rates above 1 together", Script{Phases: []Phase{{Name: "x", Duration: 1, Fault: Fault{ErrorRate: 0.6, BusinessRate: 0.6}}}}, "above 1"},
		{"error status not 5xx", Script{Phases: []Phase{{Name: "x", Duration: 1, Fault: Fault{ErrorStatus: 404}}}}, "ErrorStatus 404"},
		{"bad ramp target", Script{Phases: []Phase{{Name: "x", Duration: 1, RampTo: &Fault{Latency: -1}}}}, "negative Latency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.script.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidScript) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidScript naming %q", err, tt.want)
			}
		})
	}
}

func TestScriptAt(t *testing.T) {
	s := Script{Phases: []Phase{
		{Name: "a", Duration: 10 * time.Second, Fault: Fault{Latency: 10 * time.Millisecond}},
		{Name: "ramp", Duration: 10 * time.Second,
			Fault:  Fault{Latency: 100 * time.Millisecond, ErrorRate: 0.8, ErrorStatus: 503, Down: true},
			RampTo: &Fault{Latency: 300 * time.Millisecond}},
	}}
	tests := []struct {
		name      string
		elapsed   time.Duration
		wantIndex int
		wantFault Fault
	}{
		{"start", 0, 0, Fault{Latency: 10 * time.Millisecond}},
		{"end of first phase", 10*time.Second - 1, 0, Fault{Latency: 10 * time.Millisecond}},
		{"ramp start", 10 * time.Second, 1, Fault{Latency: 100 * time.Millisecond, ErrorRate: 0.8, ErrorStatus: 503, Down: true}},
		{"ramp midpoint interpolates numbers, keeps flags", 15 * time.Second, 1, Fault{Latency: 200 * time.Millisecond, ErrorRate: 0.4, ErrorStatus: 503, Down: true}},
		{"loops after the period", 45 * time.Second, 0, Fault{Latency: 10 * time.Millisecond}},
		{"negative counts back from the end", -5 * time.Second, 1, Fault{Latency: 200 * time.Millisecond, ErrorRate: 0.4, ErrorStatus: 503, Down: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, _, f := s.At(tt.elapsed)
			if i != tt.wantIndex || f != tt.wantFault {
				t.Fatalf("At(%v) = %d, %+v; want %d, %+v", tt.elapsed, i, f, tt.wantIndex, tt.wantFault)
			}
		})
	}
}

// The demo promises every state and cause within the first minute: the
// default script's trouble must fit in a minute (a calm tail may follow,
// long enough for incidents to end) and hold each kind of trouble.
func TestDefaultScriptTellsTheWholeStory(t *testing.T) {
	s := DefaultScript()
	var trouble, calm time.Duration
	for _, p := range s.Phases {
		if p.Fault.ErrorRate > 0 || p.Fault.Down || p.Fault.Unavailable || p.Fault.BusinessRate > 0 || p.RampTo != nil {
			trouble += calm + p.Duration
			calm = 0
		} else {
			calm += p.Duration
		}
	}
	if trouble > time.Minute {
		t.Fatalf("the trouble lasts %v, longer than a minute", trouble)
	}
	if calm < 30*time.Second {
		t.Fatalf("the calm tail is %v, too short for an incident's quiet period in the demo", calm)
	}
	var burst, down, unavailable, business, slow, ramp bool
	for _, p := range s.Phases {
		f := p.Fault
		burst = burst || f.ErrorRate >= 0.5
		down = down || f.Down
		unavailable = unavailable || f.Unavailable
		business = business || (f.BusinessRate > 0 && f.ErrorRate == 0)
		if p.RampTo != nil {
			slow = slow || p.RampTo.Latency >= 500*time.Millisecond
			ramp = ramp || (f.ErrorRate > 0 && p.RampTo.ErrorRate == 0)
		}
	}
	for name, ok := range map[string]bool{"error burst": burst, "outage (reset)": down, "outage (503)": unavailable,
		"business errors": business, "creeping latency": slow, "slow recovery": ramp} {
		if !ok {
			t.Errorf("default script has no %s phase", name)
		}
	}
}

func TestScaled(t *testing.T) {
	s := DefaultScript().Scaled(0.5)
	if got, want := s.Period(), DefaultScript().Period()/2; got != want {
		t.Fatalf("Period() = %v, want %v", got, want)
	}
	if DefaultScript().Phases[4].RampTo.Latency != 20*time.Millisecond {
		t.Fatal("Scaled changed the original's ramp")
	}
}

func TestStatusForHoldsRates(t *testing.T) {
	f := Fault{ErrorRate: 0.3, ErrorStatus: 502, BusinessRate: 0.2}
	counts := map[int]int{}
	for n := uint64(1); n <= 1000; n++ {
		counts[statusFor(f, n)]++
	}
	if got := counts[502]; got < 290 || got > 310 {
		t.Errorf("502s = %d of 1000, want about 300", got)
	}
	if got := counts[404] + counts[400]; got < 190 || got > 210 {
		t.Errorf("404s+400s = %d of 1000, want about 200", got)
	}
	if counts[404] == 0 || counts[400] == 0 {
		t.Errorf("business errors %v, want both 404 and 400", counts)
	}
	// Any 20 consecutive calls (a breaker's window) see the rate too.
	for start := uint64(1); start < 500; start += 37 {
		n500 := 0
		for n := start; n < start+20; n++ {
			if statusFor(Fault{ErrorRate: 0.7}, n) == 500 {
				n500++
			}
		}
		if n500 < 12 || n500 > 16 {
			t.Fatalf("calls %d..%d: %d failures of 20, want about 14", start, start+19, n500)
		}
	}
}

func TestClimbingScriptRaisesTheFailureRateBeforeItTrips(t *testing.T) {
	s := ClimbingScript()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	prev := -1.0
	for at := 10 * time.Second; at < 50*time.Second; at += 5 * time.Second {
		_, p, f := s.At(at)
		if p.Name != "failures climbing" || f.ErrorRate <= prev {
			t.Fatalf("at %v: phase %q error rate %v, want a climb above %v", at, p.Name, f.ErrorRate, prev)
		}
		prev = f.ErrorRate
	}
	// The 50% threshold of the demo's breakers is reached after 25 s of
	// climbing, not at once: 30 s of the headroom bar rising.
	if _, _, f := s.At(10*time.Second + 25*time.Second); f.ErrorRate < 0.49 || f.ErrorRate > 0.51 {
		t.Errorf("error rate 25 s into the climb = %v, want 0.5", f.ErrorRate)
	}
	var inventory *DependencySpec
	for _, d := range DefaultDependencies() {
		if d.Name == "inventory" {
			inventory = &d
		}
	}
	if inventory == nil || inventory.Script == nil || inventory.Script.Period() != s.Period() {
		t.Error("the demo's inventory does not follow ClimbingScript")
	}
}
