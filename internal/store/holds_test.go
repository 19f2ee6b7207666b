package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestHoldsAreStoredDesiredStateWithCoverageAndRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := openStore(t, store.Options{})
	at := clocktest.Epoch()
	h := cbdash.HoldRecord{ID: "h01", HoldRequest: cbdash.HoldRequest{
		Selector: cbdash.Selector{Service: "*", Breaker: "inventory", Labels: map[string]string{"region": "eu"}, Share: 50},
		Action:   protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "drill", Actor: "otto"},
		CreatedAt: at, Until: at.Add(10 * time.Minute)}
	if err := s.CreateHold(ctx, h); err != nil {
		t.Fatalf("CreateHold: %v", err)
	}
	if err := s.CreateHold(ctx, h); !errors.Is(err, cbdash.ErrConflict) {
		t.Fatalf("CreateHold twice = %v, want ErrConflict", err)
	}
	bad := h
	bad.ID, bad.Action = "h02", protocol.ActionRelease
	if err := s.CreateHold(ctx, bad); !errors.Is(err, cbdash.ErrInvalid) {
		t.Fatalf("CreateHold of a release = %v, want ErrInvalid", err)
	}

	// The hold is sent as a command; the breaker's answer arrives in a batch.
	cmd := cbdash.Command{ID: "h01-aa", HoldID: "h01", CommandRequest: cbdash.CommandRequest{Service: "checkout", Breaker: "inventory",
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute}, IssuedAt: at, ExpiresAt: h.Until,
		Targets: []cbdash.CommandTarget{{Instance: "c1", Status: cbdash.TargetPending}}}
	if err := s.CreateCommand(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	cov := cbdash.HoldCoverage{Service: "checkout", Instance: "c1", Breaker: "inventory", StartedAt: 7, CommandID: "h01-aa", CoveredAt: at.Add(time.Second), JoinedLate: true}
	if err := s.AddHoldCoverage(ctx, "h01", cov); err != nil {
		t.Fatalf("AddHoldCoverage: %v", err)
	}
	if err := s.AddHoldCoverage(ctx, "nope", cov); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("AddHoldCoverage of an unknown hold = %v, want ErrNotFound", err)
	}
	if err := s.SaveHello(ctx, hello("checkout", "c1", 7, "inventory"), at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveBatch(ctx, "checkout", "c1", 7, protocol.Batch{Seq: 1, CommandResults: []protocol.CommandResult{
		{ID: "h01-aa", Breaker: "inventory", OK: true, State: protocol.StateForcedOpen, At: at.Add(1500 * time.Millisecond).UnixMilli()}}}, at); err != nil {
		t.Fatal(err)
	}
	got, err := s.Hold(ctx, "h01")
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	if got.Selector.String() != h.Selector.String() || got.Action != h.Action || !got.Until.Equal(h.Until) || got.Actor != "otto" {
		t.Fatalf("Hold = %+v, want %+v", got, h)
	}
	if len(got.Coverage) != 1 {
		t.Fatalf("coverage = %+v, want one row", got.Coverage)
	}
	c := got.Coverage[0]
	if c.Status != cbdash.TargetApplied || c.State != protocol.StateForcedOpen || !c.JoinedLate ||
		!c.AnsweredAt.Equal(at.Add(1500*time.Millisecond)) || !c.CoveredAt.Equal(at.Add(time.Second)) {
		t.Fatalf("coverage = %+v", c)
	}
	if c, err := s.Command(ctx, "h01-aa"); err != nil || c.HoldID != "h01" {
		t.Fatalf("Command(h01-aa) = %+v, %v; want hold_id h01", c, err)
	}

	live, err := s.Holds(ctx, cbdash.HoldQuery{LiveAt: at.Add(time.Minute)})
	if err != nil || len(live) != 1 {
		t.Fatalf("live holds = %v, %v", live, err)
	}
	if live, _ := s.Holds(ctx, cbdash.HoldQuery{LiveAt: at.Add(11 * time.Minute)}); len(live) != 0 {
		t.Fatalf("holds live after their expiry: %v", live)
	}

	rel, err := s.ReleaseHold(ctx, "h01", at.Add(2*time.Minute), "rita", "drill over")
	if err != nil {
		t.Fatalf("ReleaseHold: %v", err)
	}
	if rel.ReleasedBy != "rita" || rel.ReleaseReason != "drill over" || !rel.End().Equal(at.Add(2*time.Minute)) {
		t.Fatalf("released hold = %+v", rel)
	}
	if _, err := s.ReleaseHold(ctx, "h01", at.Add(3*time.Minute), "rita", "again"); !errors.Is(err, cbdash.ErrConflict) {
		t.Fatalf("second release = %v, want ErrConflict", err)
	}
	if _, err := s.ReleaseHold(ctx, "nope", at, "rita", "x"); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("release of an unknown hold = %v, want ErrNotFound", err)
	}
	if live, _ := s.Holds(ctx, cbdash.HoldQuery{LiveAt: at.Add(3 * time.Minute)}); len(live) != 0 {
		t.Fatalf("holds live after their release: %v", live)
	}

	stats := []cbdash.HoldCounts{{Service: "checkout", Instance: "c1", Breaker: "inventory"}}
	stats[0].AddWindow(protocol.Window{Counts: protocol.Counts{RejectedForced: 7, FallbackSuccess: 5, FallbackFailure: 2},
		Latency: []int64{1, 2}, LatencySumMs: 3})
	if err := s.SaveHoldStats(ctx, "h01", "a", stats); err != nil {
		t.Fatalf("SaveHoldStats: %v", err)
	}
	// A collector's save replaces its own running totals: saved twice (a
	// retry) they count once.
	stats[0].AddWindow(protocol.Window{Counts: protocol.Counts{RejectedForced: 1}})
	for range 2 {
		if err := s.SaveHoldStats(ctx, "h01", "a", stats); err != nil {
			t.Fatalf("SaveHoldStats again: %v", err)
		}
	}
	// Another collector's (the instance moved to it mid-hold) adds to them.
	other := []cbdash.HoldCounts{{Service: "checkout", Instance: "c1", Breaker: "inventory"}}
	other[0].AddWindow(protocol.Window{Counts: protocol.Counts{RejectedForced: 4}, Latency: []int64{0, 1, 5}, LatencySumMs: 2})
	if err := s.SaveHoldStats(ctx, "h01", "b", other); err != nil {
		t.Fatalf("SaveHoldStats of collector b: %v", err)
	}

	// Everything survives a reopen, and the audit rows cannot be deleted.
	s.Close()
	s2, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	again, err := s2.Hold(ctx, "h01")
	if err != nil || again.ReleasedBy != "rita" || len(again.Coverage) != 1 {
		t.Fatalf("after reopen: %+v, %v", again, err)
	}
	st, err := s2.HoldStats(ctx, "h01")
	if err != nil || len(st) != 1 || st[0].Counts.RejectedForced != 12 || st[0].Counts.FallbackSuccess != 5 || st[0].Windows != 3 ||
		!slices.Equal(st[0].Latency, []int64{1, 3, 5}) || st[0].LatencySumMs != 5 {
		t.Fatalf("HoldStats after reopen = %+v, %v", st, err)
	}
	by, err := s2.HoldStatsByCollector(ctx, "h01")
	if err != nil || len(by) != 2 || by["a"][0].Counts.RejectedForced != 8 || by["b"][0].Counts.RejectedForced != 4 {
		t.Fatalf("HoldStatsByCollector after reopen = %+v, %v", by, err)
	}
	if _, err := rawDB(t, path).Exec("DELETE FROM holds"); err == nil {
		t.Fatal("deleting holds succeeded; they are part of the audit log")
	}
}

// ApplyHold records a hold's commands, their pending targets and its
// coverage rows for many instances in one transaction; a delivery to a
// hold that is not stored, or an invalid one, writes nothing.
func TestApplyHoldRecordsAChunkOfDeliveriesInOneWrite(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, store.Options{})
	at := clocktest.Epoch()
	h := cbdash.HoldRecord{ID: "h01", HoldRequest: cbdash.HoldRequest{Selector: cbdash.Selector{Service: "pay", Breaker: "db"},
		Action: protocol.ActionForceOpen, TTL: time.Hour, Reason: "drill", Actor: "otto"}, CreatedAt: at, Until: at.Add(time.Hour)}
	if err := s.CreateHold(ctx, h); err != nil {
		t.Fatal(err)
	}
	cmd := cbdash.Command{ID: "h01-aa", HoldID: "h01", IssuedAt: at, ExpiresAt: h.Until,
		CommandRequest: cbdash.CommandRequest{Service: "pay", Breaker: "db", Action: protocol.ActionForceOpen, TTL: time.Hour, Actor: "otto"}}
	var ds []cbdash.HoldDelivery
	for _, inst := range []string{"p1", "p2", "p3"} {
		ds = append(ds, cbdash.HoldDelivery{Command: cmd, Target: cbdash.CommandTarget{Instance: inst, Status: cbdash.TargetPending},
			Coverage: &cbdash.HoldCoverage{Service: "pay", Instance: inst, Breaker: "db", StartedAt: 7, CommandID: cmd.ID,
				CoveredAt: at, JoinedLate: inst == "p3"}})
	}
	rel := cbdash.Command{ID: "h00-rel", HoldID: "h01", IssuedAt: at, ExpiresAt: at.Add(time.Minute),
		CommandRequest: cbdash.CommandRequest{Service: "pay", Breaker: "db", Action: protocol.ActionRelease, Actor: "otto"}}
	ds = append(ds, cbdash.HoldDelivery{Command: rel, Target: cbdash.CommandTarget{Instance: "p4", Status: cbdash.TargetPending}})
	txs := s.Stats().Transactions
	if err := s.ApplyHold(ctx, ds); err != nil {
		t.Fatalf("ApplyHold: %v", err)
	}
	if n := s.Stats().Transactions - txs; n != 1 {
		t.Errorf("ApplyHold took %d transactions, want 1", n)
	}
	got, err := s.Command(ctx, cmd.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Targets) != 3 || got.Targets[0].Instance != "p1" || got.Targets[2].Status != cbdash.TargetPending || got.HoldID != "h01" {
		t.Errorf("command %+v, want p1-p3 pending", got)
	}
	if r, err := s.Command(ctx, rel.ID); err != nil || len(r.Targets) != 1 || r.Action != protocol.ActionRelease {
		t.Errorf("release = %+v, %v; want p4 pending", r, err)
	}
	stored, err := s.Hold(ctx, "h01")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.Coverage) != 3 || stored.Coverage[0].JoinedLate || !stored.Coverage[2].JoinedLate {
		t.Errorf("coverage %+v, want p1-p3, p3 late", stored.Coverage)
	}
	// Again to a stored command: targets and coverage are replaced, not doubled.
	if err := s.ApplyHold(ctx, ds[:1]); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Command(ctx, cmd.ID); len(got.Targets) != 3 {
		t.Errorf("targets %+v after a second delivery to p1, want 3", got.Targets)
	}

	lost := cbdash.HoldDelivery{Command: cbdash.Command{ID: "h02-aa", HoldID: "h02", CommandRequest: cmd.CommandRequest},
		Target: ds[0].Target, Coverage: ds[0].Coverage}
	if err := s.ApplyHold(ctx, []cbdash.HoldDelivery{{Command: cbdash.Command{ID: "h02-bb", HoldID: "h02", CommandRequest: cmd.CommandRequest},
		Target: ds[0].Target}, lost}); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("ApplyHold to an unknown hold = %v, want ErrNotFound", err)
	}
	if _, err := s.Command(ctx, "h02-bb"); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("a failed ApplyHold stored command h02-bb: %v", err)
	}
	bad := ds[0]
	bad.Target.Instance = ""
	if err := s.ApplyHold(ctx, []cbdash.HoldDelivery{bad}); !errors.Is(err, cbdash.ErrInvalid) {
		t.Errorf("ApplyHold of a target without an instance = %v, want ErrInvalid", err)
	}
}

// ApplyHold writes a chunk's rows in multi-row statements (of 10 and 1
// rows here) with the outcome of writing them one by one, in order: a
// target delivered twice in one list (an instance's two breakers share
// the service's command) is one row, its last delivery's; a coverage row
// delivered twice keeps its first JoinedLate and takes its last command
// id and time. PostgreSQL refuses one statement that upserts a row twice.
func TestApplyHoldWritesAChunkAsItsDeliveriesOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t, store.Options{})
	at := clocktest.Epoch()
	h := cbdash.HoldRecord{ID: "h01", HoldRequest: cbdash.HoldRequest{Selector: cbdash.Selector{Service: "pay", Breaker: "*"},
		Action: protocol.ActionForceOpen, TTL: time.Hour, Reason: "drill", Actor: "otto"}, CreatedAt: at, Until: at.Add(time.Hour)}
	if err := s.CreateHold(ctx, h); err != nil {
		t.Fatal(err)
	}
	cmd := cbdash.Command{ID: "h01-aa", HoldID: "h01", IssuedAt: at, ExpiresAt: h.Until,
		CommandRequest: cbdash.CommandRequest{Service: "pay", Breaker: "db", Action: protocol.ActionForceOpen, TTL: time.Hour, Actor: "otto"}}
	delivery := func(inst, breaker, cmdID string, covered time.Time, late bool) cbdash.HoldDelivery {
		return cbdash.HoldDelivery{Command: cmd, Target: cbdash.CommandTarget{Instance: inst, Status: cbdash.TargetPending, At: covered},
			Coverage: &cbdash.HoldCoverage{Service: "pay", Instance: inst, Breaker: breaker, StartedAt: 7, CommandID: cmdID,
				CoveredAt: covered, JoinedLate: late}}
	}
	var ds []cbdash.HoldDelivery
	later := at.Add(time.Second)
	for i := range 21 {
		ds = append(ds, delivery(fmt.Sprintf("p%02d", i), "db", cmd.ID, at, false))
		switch i { // the repeats in the same statement of 10 rows as the first
		case 3:
			ds = append(ds, delivery("p03", "cache", cmd.ID, later, false)) // p03's second breaker: its target again
		case 5:
			ds = append(ds, delivery("p05", "db", "h01-bb", later, true)) // p05/db again
		}
	}
	if err := s.ApplyHold(ctx, ds); err != nil {
		t.Fatalf("ApplyHold: %v", err)
	}
	got, err := s.Command(ctx, cmd.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Targets) != 21 {
		t.Fatalf("%d targets, want 21 (p03 once)", len(got.Targets))
	}
	for _, tg := range got.Targets {
		if want := at; tg.Instance == "p03" || tg.Instance == "p05" {
			if want = later; !tg.At.Equal(want) {
				t.Errorf("target %s at %v, want its last delivery's %v", tg.Instance, tg.At, want)
			}
		}
	}
	stored, err := s.Hold(ctx, "h01")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.Coverage) != 22 {
		t.Fatalf("%d coverage rows, want 22 (21 db, p03's cache)", len(stored.Coverage))
	}
	for _, c := range stored.Coverage {
		if c.Instance != "p05" || c.Breaker != "db" {
			continue
		}
		if c.JoinedLate || c.CommandID != "h01-bb" || !c.CoveredAt.Equal(later) {
			t.Errorf("p05/db = %+v, want its first joined_late (false), its last command id and time", c)
		}
	}
}
