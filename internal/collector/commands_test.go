package collector

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestCommandsReachConnectedAndReconnectingInstances(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	ctx := context.Background()
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	b := dialRaw(t, h, h.token)
	b.hello("a2", 1)
	_, events, cancel := h.col.Subscribe()
	defer cancel()

	// Both connected: both get the command at once.
	cmd, err := h.col.Issue(ctx, cbdash.Actor{Name: "ann"}, cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "failover", Actor: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmd.Targets) != 2 {
		t.Fatalf("targets %+v", cmd.Targets)
	}
	for _, ag := range []*rawAgent{a, b} {
		var wc protocol.Command
		ag.expect(protocol.TypeCommand, &wc)
		if wc.ID != cmd.ID || wc.Action != protocol.ActionForceOpen || wc.TTLMillis <= 0 || wc.TTLMillis > 60000 || wc.Actor != "ann" {
			t.Fatalf("wire command %+v", wc)
		}
	}
	for e := range events {
		if e.Kind == cbdash.EventCommand {
			if e.Command.ID != cmd.ID {
				t.Fatalf("command event %+v", e.Command)
			}
			break
		}
	}

	// a answers inside a batch: its target is applied, and published.
	res := h.batch(1, 0, 0)
	res.CommandResults = []protocol.CommandResult{{ID: cmd.ID, Breaker: "db", OK: true, State: protocol.StateForcedOpen, At: h.now().UnixMilli()}}
	a.send(res)
	a.expect(protocol.TypeAck, nil)
	got, err := h.store.Command(ctx, cmd.ID)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, tg := range got.Targets {
		status[tg.Instance] = tg.Status
	}
	if status["a1"] != cbdash.TargetApplied || status["a2"] != cbdash.TargetPending {
		t.Fatalf("targets %+v", got.Targets)
	}
	for e := range events {
		if e.Kind == cbdash.EventCommand && len(e.Command.Targets) == 2 && e.Command.Targets[0].Status == cbdash.TargetApplied {
			break
		}
	}

	// a2 goes offline; a command for it alone waits and arrives right
	// after the welcome when it reconnects.
	b.conn.CloseNow()
	eventually.True(t, "a2 disconnected", func() bool { return len(h.col.live.Conns("api", []string{"a2"})) == 0 })
	only, err := h.col.Issue(ctx, cbdash.Actor{Name: "test"}, cbdash.CommandRequest{Service: "api", Breaker: "cache", Action: protocol.ActionReset, Instance: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	b2 := dialRaw(t, h, h.token)
	b2.hello("a2", 1)
	seen := map[string]bool{}
	for range 2 { // the force (still pending for a2) and the reset
		var wc protocol.Command
		b2.expect(protocol.TypeCommand, &wc)
		seen[wc.ID] = true
	}
	if !seen[cmd.ID] || !seen[only.ID] {
		t.Fatalf("a2 got %v, want both pending commands", seen)
	}
}

func TestCommandShareAndValidation(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	ctx := context.Background()
	for _, inst := range []string{"a1", "a2", "a3", "a4"} {
		dialRaw(t, h, h.token).hello(inst, 1)
	}
	cmd, err := h.col.Issue(ctx, cbdash.Actor{Name: "test"}, cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionForceClosed, TTL: time.Minute, Share: 50, Reason: "drill"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string // each instance is in or out by the hash of its id
	for _, inst := range []string{"a1", "a2", "a3", "a4"} {
		if cbdash.InShare(inst, 50) {
			want = append(want, inst)
		}
	}
	if got := targetNames(cmd); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("a 50%% share targeted %v, want %v (by hash)", got, want)
	}
	again, err := h.col.Issue(ctx, cbdash.Actor{Name: "test"}, cbdash.CommandRequest{Service: "api", Breaker: "cache", Action: protocol.ActionReset, Share: 50})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := targetNames(again), targetNames(cmd); strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("the same share picked other instances: %v then %v", b, a)
	}
	tests := []struct {
		name string
		req  cbdash.CommandRequest
		want error
	}{
		{"force without ttl", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionForceOpen}, cbdash.ErrInvalid},
		{"force without reason", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionForceOpen, TTL: time.Minute}, cbdash.ErrInvalid},
		{"force longer than the maximum hold", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionForceOpen, TTL: 8760 * time.Hour, Reason: "x"}, cbdash.ErrInvalid},
		{"reset of a held breaker", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionReset}, cbdash.ErrConflict},
		{"release of part of a hold", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionRelease, Instance: "a1"}, cbdash.ErrConflict},
		{"unknown action", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: "explode"}, cbdash.ErrInvalid},
		{"share above 100", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionReset, Share: 150}, cbdash.ErrInvalid},
		{"instance and share", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionReset, Share: 10, Instance: "a1"}, cbdash.ErrInvalid},
		{"no service", cbdash.CommandRequest{Breaker: "db", Action: protocol.ActionReset}, cbdash.ErrInvalid},
		{"unknown breaker", cbdash.CommandRequest{Service: "api", Breaker: "queue", Action: protocol.ActionReset}, cbdash.ErrNotFound},
		{"unknown instance", cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionReset, Instance: "zz"}, cbdash.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := h.col.Issue(ctx, cbdash.Actor{Name: "ann"}, tt.req); !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
		})
	}
}

func targetNames(cmd cbdash.Command) []string {
	var out []string
	for _, t := range cmd.Targets {
		out = append(out, t.Instance)
	}
	return out
}

func TestUnansweredCommandTargetsExpire(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	h := startHarness(t, "", func(c *Config) { c.Clock = clk })
	ctx := context.Background()
	dialRaw(t, h, h.token).hello("a1", 1) // connected but never answers
	cmd, err := h.col.Issue(ctx, cbdash.Actor{Name: "test"}, cbdash.CommandRequest{Service: "api", Breaker: "db", Action: protocol.ActionReset, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Past the TTL, the collector's once-a-second sweep (on the clock)
	// expires the target.
	clk.Advance(2 * time.Second)
	var got cbdash.Command
	eventually.True(t, "the target expired", func() bool {
		var err error
		if got, err = h.store.Command(ctx, cmd.ID); err != nil {
			t.Fatal(err)
		}
		return got.Targets[0].Status == cbdash.TargetExpired
	})
}
