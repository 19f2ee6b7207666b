package collector

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Holds over two collectors (issue 36): A holds lines of its own
// instances only, yet what a hold would cover, pre-flight's "breached
// now" and the refusal of breakers that cannot be held count B's
// instances too (the store's lines, B's summaries).

// apiDB is the dependency the raw agents report.
var apiDB = cbdash.DependencyKey{Service: "api", Breaker: "db"}

// waitForBsPart waits until A holds B's summary of api/db counting n live
// members with admitted calls in their last windows.
func waitForBsPart(t *testing.T, a *harness, n int, admitted int64) {
	t.Helper()
	eventually.True(t, "A holding B's summary of api/db", func() bool {
		for _, p := range a.col.live.Parts() {
			if p.DependencyKey == apiDB && p.Instances-p.Stale == n && p.Last.Admitted == admitted {
				return true
			}
		}
		return false
	})
}

// TestAHoldPlanOnACountsTheInstancesOfB: a1 on A, b1 and b2 on B, b3 on
// B with holds_unsupported. A's plan of a hold of api/db lists a1, b1
// and b2, counts the calls per second of all three, and lists b3 as
// unsupported; a hold of api/db on b3 alone is refused on A.
func TestAHoldPlanOnACountsTheInstancesOfB(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "plana", "planb", nil)
	connect(t, a, "a1", 10, 0)
	connect(t, b, "b1", 10, 0)
	connect(t, b, "b2", 20, 0)
	b3 := dialRaw(t, b, b.token)
	h := rawHello("b3", 1)
	h.Breakers[0].HoldsUnsupported = true
	b3.send(h)
	b3.expect(protocol.TypeWelcome, new(protocol.Welcome))
	b3.send(b.batch(1, 30, 0))
	b3.expect(protocol.TypeAck, new(protocol.Ack))
	waitForBsPart(t, a, 3, 60)

	ctx := context.Background()
	req := cbdash.HoldRequest{Selector: cbdash.Selector{Service: "api", Breaker: "db"}, Action: protocol.ActionForceOpen,
		TTL: time.Minute, Reason: "drill", Actor: "ann"}
	p, err := a.col.PlanHold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"api/a1", "api/b1", "api/b2"}; !slices.Equal(p.Instances, want) || p.Eligible != 4 {
		t.Fatalf("A's plan: instances %v, %d eligible; want %v, 4 eligible (b3 cannot be held)", p.Instances, p.Eligible, want)
	}
	if len(p.Unsupported) != 1 || !strings.HasPrefix(p.Unsupported[0], "api/b3: ") {
		t.Fatalf("A's plan: unsupported %q, want b3's", p.Unsupported)
	}
	// a1's 10 calls/s; B's summary counts b1, b2 and b3 (60/s), but b3
	// cannot be held, so B's part is left out rather than overcounted.
	// The plan says so: b1's and b2's calls are not known on A.
	if p.CallsPerSecond != 10 || p.CallsUnknown != 2 {
		t.Fatalf("A's plan: %v calls/s, %d instances' calls unknown; want 10 (a1; B's part has a member that cannot be held) and 2 (b1, b2)",
			p.CallsPerSecond, p.CallsUnknown)
	}
	req.Selector.Instances = []string{"b3"}
	if _, err := a.col.CreateHold(ctx, cbdash.Actor{Name: "ann"}, req); !errors.Is(err, cbdash.ErrInvalid) || !strings.Contains(err.Error(), "api/b3") {
		t.Fatalf("a hold of b3 alone on A: %v, want refused as unsupported on api/b3", err)
	}
}

// TestACommandOnAForAnUnsupportedBreakerOnBIsRefused: b3 on B says
// holds_unsupported for db; a reset of api/db on b3 issued on A is
// refused up front, as one collector refuses it, rather than routed to
// an agent that can only refuse it.
func TestACommandOnAForAnUnsupportedBreakerOnBIsRefused(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "cmda", "cmdb", nil)
	connect(t, a, "a1", 10, 0)
	b3 := dialRaw(t, b, b.token)
	h := rawHello("b3", 1)
	h.Breakers[0].HoldsUnsupported = true
	b3.send(h)
	b3.expect(protocol.TypeWelcome, new(protocol.Welcome))
	b3.send(b.batch(1, 30, 0))
	b3.expect(protocol.TypeAck, new(protocol.Ack))
	waitForBsPart(t, a, 1, 30)
	_, err := a.col.Issue(context.Background(), cbdash.Actor{Name: "ann"}, cbdash.CommandRequest{Service: "api", Breaker: "db",
		Action: protocol.ActionReset, Instance: "b3", Reason: "try again"})
	if !errors.Is(err, cbdash.ErrInvalid) || !strings.Contains(err.Error(), "api/b3") {
		t.Fatalf("a reset of b3 (on B) issued on A: %v, want refused as unsupported on api/b3", err)
	}
}

// TestAHoldPlanOnACountsTheCallsOfB: without a member that cannot be
// held, B's part counts in the calls per second.
func TestAHoldPlanOnACountsTheCallsOfB(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "ratea", "rateb", nil)
	connect(t, a, "a1", 10, 0)
	connect(t, b, "b1", 10, 0)
	connect(t, b, "b2", 20, 0)
	waitForBsPart(t, a, 2, 30)
	p, err := a.col.PlanHold(context.Background(), cbdash.HoldRequest{Selector: cbdash.Selector{Service: "api", Breaker: "db"},
		Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "drill", Actor: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"api/a1", "api/b1", "api/b2"}; !slices.Equal(p.Instances, want) || p.Eligible != 3 || p.CallsPerSecond != 40 || p.CallsUnknown != 0 {
		t.Fatalf("A's plan: instances %v, %d eligible, %v calls/s, %d unknown; want %v, 3, 40, 0",
			p.Instances, p.Eligible, p.CallsPerSecond, p.CallsUnknown, want)
	}
	// A selector naming instances narrows B's part: its calls cannot be
	// counted from a summary, and the plan says whose are missing.
	p, err = a.col.PlanHold(context.Background(), cbdash.HoldRequest{Selector: cbdash.Selector{Service: "api", Breaker: "db",
		Instances: []string{"a1", "b2"}}, Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "drill", Actor: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if p.CallsPerSecond != 10 || p.CallsUnknown != 1 {
		t.Fatalf("A's plan of a1 and b2: %v calls/s, %d unknown; want 10 (a1) and 1 (b2)", p.CallsPerSecond, p.CallsUnknown)
	}
}

// TestPreflightOnARefusesWhenAnInstanceOnBBreaches: a1 on A is fine, b1
// on B fails 15 of its 20 calls; a drill of api/db stopping at an error
// rate above 40 % is refused on A (15 of 30 calls: 50 %), as one
// collector would.
func TestPreflightOnARefusesWhenAnInstanceOnBBreaches(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "prea", "preb", nil)
	connect(t, a, "a1", 10, 0)
	connect(t, b, "b1", 20, 15)
	waitForBsPart(t, a, 1, 20)
	stop, err := cbdash.ParseStopCondition("error-rate>40%")
	if err != nil {
		t.Fatal(err)
	}
	req := cbdash.HoldRequest{Selector: cbdash.Selector{Service: "api", Breaker: "db"}, Action: protocol.ActionForceOpen,
		TTL: time.Minute, Reason: "drill", StopIf: []cbdash.StopCondition{stop}}
	_, err = a.col.CreateHold(context.Background(), cbdash.Actor{Name: "ann"}, req)
	if !errors.Is(err, cbdash.ErrConflict) || !strings.Contains(err.Error(), "already breached") {
		t.Fatalf("a drill on A while b1 on B fails: %v, want refused by pre-flight (breached now)", err)
	}
}
