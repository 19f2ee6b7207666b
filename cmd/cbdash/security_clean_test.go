package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestHoldsPrintsServerTextEscaped runs `cbdash holds` and `cbdash holds
// report` against a real server whose store holds a hold with terminal
// controls in its reason and actor (stored before the API refused them,
// or written by another client of the store): the CLI shows them escaped.
func TestHoldsPrintsServerTextEscaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.Virtual()
	stack := stacktest.Start(t, stacktest.Options{Clock: clk})
	u, err := stack.Store.CreateUser(ctx, "otto", cbdash.RoleOperator, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := stack.Store.CreateUserToken(ctx, u.ID, "cli")
	if err != nil {
		t.Fatal(err)
	}
	const evil = "x\u001b[2J\u009b31m"
	h := cbdash.HoldRecord{ID: "h0123456789abcdef", CreatedAt: clk.Now().Add(-time.Minute), Until: clk.Now().Add(time.Hour),
		HoldRequest: cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"},
			Action: protocol.ActionForceOpen, TTL: time.Hour, Reason: evil, Actor: "otto" + evil}}
	if err := stack.Store.CreateHold(ctx, h); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CBDASH_SERVER": stack.URL(), "CBDASH_TOKEN": token}
	for _, args := range [][]string{{"holds", "--all"}, {"holds", "--all", "--json"}, {"holds", "report", h.ID}, {"holds", "report", h.ID, "--json"}} {
		code, out, stderr := cliOn(t, clk, env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, %s", args, code, stderr)
		}
		if strings.ContainsAny(out, "\x1b\u009b") {
			t.Errorf("%v printed a terminal control raw:\n%q", args, out)
		}
		want := []string{`x\x1b`, `\x9b31m`} // the Markdown report escapes [ too
		if args[len(args)-1] == "--json" {
			want = []string{`x\u001b[2J\u009b31m`}
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%v does not show the reason escaped (%s):\n%s", args, w, out)
			}
		}
	}
}
