package web

import (
	"context"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/cbdash/cbdash/web/templates"
)

func TestRateThresholdsAreDistinctAndNeverStacked(t *testing.T) {
	t.Parallel()
	cfg := protocol.BreakerConfig{FailureRateThreshold: 50, SlowCallRateThreshold: 80, SlowCallDurationMillis: 200}
	got := rateThresholds(cfg)
	if len(got) != 2 || got[0].class != "t2" || got[1].class != "t3" {
		t.Fatalf("different thresholds = %+v, want a t2 failure and a t3 slow-call line", got)
	}
	cfg.SlowCallRateThreshold = 50
	got = rateThresholds(cfg)
	if len(got) != 1 || got[0].class != "t0" || got[0].label != "failure and slow-call threshold 50%" {
		t.Fatalf("equal thresholds = %+v, want one shared line", got)
	}
	cfg.SlowCallDurationMillis = 0
	if got = rateThresholds(cfg); len(got) != 1 || got[0].class != "t2" {
		t.Fatalf("slow calls off = %+v, want the failure line only", got)
	}
}

func TestCommandsPanelHidesAnEmptyWhy(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	cs := []templates.CommandView{{Action: "release", Scope: "all instances", Actor: "otto"}, {Action: "force open", Reason: "db failover", Actor: "ada"}}
	if err := templates.DepCommands(cs).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "why:"); n != 1 || !strings.Contains(b.String(), "why: db failover") {
		t.Fatalf("%d why: lines, want only the one with a reason:\n%s", n, b.String())
	}
}

func TestTransitionInstancesDoNotWrap(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	rows := []templates.TransitionRow{{At: "19:06:00", Instance: "checkout-1"}}
	if err := templates.TransitionLog(rows).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `<td class="nowrap">checkout-1</td>`) {
		t.Fatalf("instance cell wraps:\n%s", b.String())
	}
}
