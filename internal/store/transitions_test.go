package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// seedTransitions stores, for pay-1 and pay-2, db: closed>open at +0s,
// open>half_open at +10s, half_open>open at +20s; and psp:
// closed>forced_open at +30s.
func seedTransitions(t *testing.T, s *store.Store) {
	t.Helper()
	tr := func(br, from, to string, at time.Duration) protocol.Transition {
		return protocol.Transition{Breaker: br, From: from, To: to, At: t0.Add(at).UnixMilli(), Cause: protocol.Cause{Kind: protocol.CauseFailureRate}}
	}
	for _, inst := range []string{"pay-1", "pay-2"} {
		mustSave(t, s, "pay", inst, 1, protocol.Batch{Seq: 1, Transitions: []protocol.Transition{
			tr("db", protocol.StateClosed, protocol.StateOpen, 0),
			tr("db", protocol.StateOpen, protocol.StateHalfOpen, 10*time.Second),
			tr("db", protocol.StateHalfOpen, protocol.StateOpen, 20*time.Second),
			tr("psp", protocol.StateClosed, protocol.StateForcedOpen, 30*time.Second),
		}})
	}
}

func TestTransitionsFilterAndOrderNewestFirst(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	seedTransitions(t, s)
	for _, c := range []struct {
		name  string
		q     cbdash.TransitionQuery
		want  int
		first time.Duration
	}{
		{"all", cbdash.TransitionQuery{}, 8, 30 * time.Second},
		{"one breaker", cbdash.TransitionQuery{Service: "pay", Breaker: "db"}, 6, 20 * time.Second},
		{"one instance", cbdash.TransitionQuery{Instance: "pay-2"}, 4, 30 * time.Second},
		{"time range", cbdash.TransitionQuery{From: t0.Add(5 * time.Second), To: t0.Add(30 * time.Second)}, 4, 20 * time.Second},
		{"limit", cbdash.TransitionQuery{Limit: 3}, 3, 30 * time.Second},
		{"other service", cbdash.TransitionQuery{Service: "shop"}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.Transitions(context.Background(), c.q)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != c.want {
				t.Fatalf("%d transitions, want %d", len(got), c.want)
			}
			for i := 1; i < len(got); i++ {
				if got[i].At > got[i-1].At {
					t.Fatalf("not newest first: %d after %d", got[i].At, got[i-1].At)
				}
			}
			if len(got) > 0 && got[0].At != t0.Add(c.first).UnixMilli() {
				t.Errorf("first at %v, want %v", time.UnixMilli(got[0].At).Sub(t0), c.first)
			}
		})
	}
}

func TestOpensSinceCountsTripsPerDependency(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	seedTransitions(t, s)
	for _, c := range []struct {
		name  string
		since time.Duration
		want  map[cbdash.DependencyKey]int
	}{
		// One trip (closed > open) per instance; a failed probe (half_open >
		// open) reopens the same episode and forced_open is an operator's:
		// neither is a trip.
		{"from the start", 0, map[cbdash.DependencyKey]int{{Service: "pay", Breaker: "db"}: 2}},
		{"after the trips", time.Second, map[cbdash.DependencyKey]int{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.OpensSince(context.Background(), t0.Add(c.since))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("OpensSince = %v, want %v", got, c.want)
			}
			for k, n := range c.want {
				if got[k] != n {
					t.Fatalf("OpensSince = %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestCompactExpiresOldTransitionsButNeverCommands(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{Retention: store.Retention{Transitions: 24 * time.Hour}})
	ctx := context.Background()
	seedTransitions(t, s)
	if err := s.CreateCommand(ctx, command("c1", t0, "pay-1")); err != nil {
		t.Fatal(err)
	}
	count := func(now time.Time) int {
		t.Helper()
		if err := s.Compact(ctx, now); err != nil {
			t.Fatal(err)
		}
		got, err := s.Transitions(ctx, cbdash.TransitionQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	if n := count(t0.Add(23 * time.Hour)); n != 8 {
		t.Fatalf("within retention: %d transitions, want 8", n)
	}
	// 24h after +10s: the first two of each instance are older than a day.
	if n := count(t0.Add(24*time.Hour + 15*time.Second)); n != 4 {
		t.Fatalf("partly past retention: %d transitions, want 4", n)
	}
	if n := count(t0.Add(10 * 365 * 24 * time.Hour)); n != 0 {
		t.Fatalf("past retention: %d transitions, want 0", n)
	}
	if _, err := s.Command(ctx, "c1"); err != nil {
		t.Fatalf("the command audit log lost c1 to Compact: %v", err)
	}
}
