package loadgen

import (
	"strings"
	"testing"
	"time"
)

// With several collectors the headline CPU is theirs together: the cores
// of all, and the CPU per report any of them acked (not the first one's
// CPU over every collector's reports, which halved it for two).
func TestTheHeadlineCPUOfSeveralCollectorsIsTheirsTogether(t *testing.T) {
	cs := []CollectorResult{
		{Windows: 300_000, CPU: 0.18, CPUPerReport: 18 * time.Microsecond},
		{Windows: 100_000, CPU: 0.06, CPUPerReport: 14 * time.Microsecond},
	}
	cores, per, ok := together(cs)
	if !ok || cores < 0.2399 || cores > 0.2401 || per != 17*time.Microsecond {
		t.Fatalf("together: %.4f cores, %v per report, %v; want 0.24, 17µs, true", cores, per, ok)
	}
	if _, _, ok := together(cs[:1]); ok {
		t.Error("one collector: together says ok")
	}
	cs[1].CPU = 0 // no process metrics there
	if _, _, ok := together(cs); ok {
		t.Error("a collector without CPU figures: together says ok")
	}
	r := Result{Collectors: cs}
	if got := r.summary(); !strings.Contains(got, "CPU of the 2 collectors together: ") {
		t.Errorf("the headline does not say whose CPU it is:\n%s", got)
	}
}
