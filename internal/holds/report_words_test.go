package holds

import (
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// A drill report says what a breaker answered in words that stay true
// after the hold ended, and rounds its latencies as the page does.
func TestHoldReportMarkdownWordsAfterTheHold(t *testing.T) {
	t.Parallel()
	start := clocktest.Noon()
	p := cbdash.HoldPeriod{Calls: 10, P50: 247749999 * time.Nanosecond, P99: 1500 * time.Microsecond}
	r := cbdash.HoldReport{
		Hold:  cbdash.HoldRecord{ID: "h0123456789abcdef", HoldRequest: cbdash.HoldRequest{Action: protocol.ActionForceOpen, Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"}}, Until: start.Add(time.Minute), ReleasedAt: start.Add(30 * time.Second)},
		Start: start, End: start.Add(30 * time.Second),
		Instances: []cbdash.HoldInstanceReport{{Service: "checkout", Instance: "checkout-1", Breaker: "payments", Status: cbdash.TargetApplied,
			State: protocol.StateForcedOpen, CoveredAt: start, During: p}},
		Total:        p,
		Dependencies: []cbdash.HoldDependencyReport{{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}, Before: p, During: p}},
	}
	md := string(ReportMarkdown(r))
	for _, bad := range []string{"now forced", "forced_open", "247.749999ms", "1.5ms"} {
		if strings.Contains(md, bad) {
			t.Errorf("the report of a released hold says %q:\n%s", bad, md)
		}
	}
	for _, want := range []string{"applied, forced open until the hold ended", "| 248 ms | 2 ms |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	if !strings.HasSuffix(md, "\n") {
		t.Error("the report does not end with a newline")
	}
	if got := AnswerText(r.Instances[0], true); got != "applied, now forced open" {
		t.Errorf("answer while ongoing: %q", got)
	}
}
