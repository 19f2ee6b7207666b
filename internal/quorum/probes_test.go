package quorum_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/quorum"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// deferral is one defer_probes the rotation sent.
type deferral struct {
	instances []string
	ttl       time.Duration
	reason    string
}

type commands struct {
	mu   sync.Mutex
	sent []deferral
}

func (c *commands) DeferProbes(_ context.Context, k cbdash.DependencyKey, instances []string, ttl time.Duration, reason string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k != payments {
		panic("a deferral for " + k.String())
	}
	c.sent = append(c.sent, deferral{instances: slices.Clone(instances), ttl: ttl, reason: reason})
	return nil
}

// take returns what was sent since the last take.
func (c *commands) take() []deferral {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sent
	c.sent = nil
	return out
}

func rotating(t *testing.T, rule string) (*world, *commands) {
	w := newWorld(t, 6, rule)
	cmds := &commands{}
	w.a = quorum.New(quorum.Config{Rules: w.rules, Holds: w.m, Live: w, Commands: cmds, Now: w.clk.Now, Log: slog.New(slog.DiscardHandler)})
	return w, cmds
}

func TestProbeRotationOneProberPerIntervalThenStaggeredRelease(t *testing.T) {
	w, cmds := rotating(t, "checkout/payments:q=50%,m=3,probes=1")
	ctx := context.Background()
	w.set(protocol.StateOpen, 0, 1, 2, 3, 4, 5) // open 10 s each
	w.a.Check(ctx)
	got := cmds.take()
	if len(got) != 1 || strings.Join(got[0].instances, ",") != "i1,i2,i3,i4,i5" || got[0].ttl != 30*time.Second {
		t.Fatalf("at the start: %+v, want i1..i5 deferred for 30s (i0 probes)", got)
	}
	if r := got[0].reason; !strings.Contains(r, "6 of 6 instances") || !strings.Contains(r, "probes=1") || !strings.Contains(r, "now i0") {
		t.Errorf("reason %q lacks the figures, the rule or the prober", r)
	}
	w.clk.Advance(10 * time.Second)
	w.set(protocol.StateOpen, 0) // i0's probe failed
	w.a.Check(ctx)
	got = cmds.take()
	if len(got) != 2 || !slices.Equal(got[0].instances, []string{"i0"}) || got[0].ttl != 30*time.Second {
		t.Fatalf("after i0's probe: %+v, want i0 deferred (and the others renewed)", got)
	}
	w.clk.Advance(5 * time.Second)
	w.a.Check(ctx)
	if got := cmds.take(); len(got) != 0 {
		t.Fatalf("half an interval after the last probe: %+v, want nothing", got)
	}
	w.clk.Advance(5 * time.Second)
	w.a.Check(ctx)
	got = cmds.take()
	if len(got) == 0 || !slices.Equal(got[0].instances, []string{"i1"}) || got[0].ttl != 0 {
		t.Fatalf("an interval after the last probe: %+v, want i1 let probe", got)
	}
	w.clk.Advance(time.Second)
	w.set(protocol.StateClosed, 1) // i1's probe succeeded: the verdict
	w.a.Check(ctx)
	got = cmds.take()
	var offs []string
	for _, d := range got {
		if d.ttl > 0 || d.instances[0] == "i0" {
			offs = append(offs, d.instances[0]+"+"+d.ttl.String())
		}
	}
	if strings.Join(offs, " ") != "i0+0s i2+2s i3+4s i4+6s i5+8s" {
		t.Fatalf("at the verdict: %v, want the waiting instances let probe over a 10s spread", offs)
	}
	if !strings.Contains(got[0].reason, "verdict is closed: i1 closed again") {
		t.Errorf("reason %q", got[0].reason)
	}
	w.clk.Advance(time.Second)
	w.a.Check(ctx) // five still open: a quorum, but the verdict was closed
	if got := cmds.take(); len(got) != 0 {
		t.Fatalf("after the verdict, the quorum still met: %+v, want no new rotation", got)
	}
}

func TestProbeRotationNeverOnAMinorityAndOffWithoutProbes(t *testing.T) {
	for _, rule := range []string{"checkout/payments:q=50%,m=3,probes=1", "checkout/payments:q=50%,m=3"} {
		w, cmds := rotating(t, rule)
		w.set(protocol.StateOpen, 0) // one instance of six with a bad path
		w.a.Check(context.Background())
		if got := cmds.take(); len(got) != 0 {
			t.Fatalf("%s, one open: %+v, want nothing", rule, got)
		}
		w.set(protocol.StateOpen, 1, 2, 3, 4, 5)
		w.a.Check(context.Background())
		if got := cmds.take(); (len(got) > 0) != strings.Contains(rule, "probes") {
			t.Fatalf("%s, all open: %+v", rule, got)
		}
	}
}

func TestProbeRotationEndsAtOnceWhenTheQuorumDissolves(t *testing.T) {
	w, cmds := rotating(t, "checkout/payments:q=50%,m=3,probes=2")
	w.set(protocol.StateOpen, 0, 1, 2, 3)
	w.a.Check(context.Background())
	if got := cmds.take(); len(got) != 1 || strings.Join(got[0].instances, ",") != "i2,i3" {
		t.Fatalf("start: %+v, want i2, i3 deferred (i0 and i1 probe)", got)
	}
	w.mu.Lock()
	for _, ib := range w.lines[:3] {
		ib.Stale = true // gone: the quorum dissolves (one open left)
	}
	w.mu.Unlock()
	w.a.Check(context.Background())
	got := cmds.take()
	if len(got) != 2 || got[0].ttl != 0 || got[1].ttl != 0 || !strings.Contains(got[0].reason, "quorum dissolved") {
		t.Fatalf("dissolved: %+v, want every deferral ended at once", got)
	}
}
