package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
)

// TestSilencesAreKeptWithWhoMadeAndEndedThem: a silence is stored with
// its matchers, reason and creator, listed while active, refused without
// a matcher or a reason, and kept after it is expired (with who expired
// it) or has ended: the audit trail.
func TestSilencesAreKeptWithWhoMadeAndEndedThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIncidentStore(t)
	now := t0.Add(time.Hour).UTC()
	m := cbdash.SilenceMatchers{Service: "checkout", Breaker: "payments", Labels: map[string]string{"team": "pay"}}
	a, err := s.CreateSilence(ctx, cbdash.Silence{Matchers: m, Reason: "drill", CreatedBy: "otto", CreatedAt: now, EndsAt: now.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateSilence(ctx, cbdash.Silence{Matchers: cbdash.SilenceMatchers{Service: "search"}, Reason: "deploy", CreatedBy: "vera",
		CreatedAt: now, EndsAt: now.Add(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []cbdash.Silence{
		{Reason: "everything", CreatedBy: "otto", CreatedAt: now, EndsAt: now.Add(time.Hour)},
		{Matchers: m, CreatedBy: "otto", CreatedAt: now, EndsAt: now.Add(time.Hour)},
		{Matchers: m, Reason: "backwards", CreatedBy: "otto", CreatedAt: now, EndsAt: now.Add(-time.Hour)},
	} {
		if _, err := s.CreateSilence(ctx, bad); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("create %+v: %v, want invalid", bad, err)
		}
	}
	if err := s.ExpireSilence(ctx, a.ID, "ada", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.ExpireSilence(ctx, 999, "ada", now); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("expire an unknown silence: %v, want not found", err)
	}
	active, err := s.Silences(ctx, now.Add(2*time.Minute), 0)
	if err != nil || len(active) != 1 || active[0].ID != b.ID {
		t.Errorf("active after the expiry = %+v (%v), want only silence %d", active, err, b.ID)
	}
	all, err := s.Silences(ctx, time.Time{}, 0)
	if err != nil || len(all) != 2 {
		t.Fatalf("all = %+v (%v)", all, err)
	}
	got := all[1]
	if got.ID != a.ID || got.CreatedBy != "otto" || got.ExpiredBy != "ada" || !got.ExpiredAt.Equal(now.Add(time.Minute)) ||
		got.Matchers.Labels["team"] != "pay" || got.Reason != "drill" || !got.StartsAt.Equal(now) {
		t.Errorf("the expired silence = %+v, want it kept with its creator, matchers and who expired it", got)
	}
	if later, _ := s.Silences(ctx, now.Add(time.Hour), 0); len(later) != 0 {
		t.Errorf("silences active an hour later = %+v, want none", later)
	}
}

// TestFlappingIsClaimedOnceAndAcknowledgementsKept: the flapping message
// of a firing alert is claimed once per episode, not for an acknowledged
// alert, and is pending until its delivery is acknowledged; an acknowledgement is kept (the first one wins) and a new
// episode starts without either.
func TestFlappingIsClaimedOnceAndAcknowledgementsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIncidentStore(t)
	r, err := s.CreateAlertRule(ctx, cbdash.AlertRule{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: "http://127.0.0.1:9/hook",
		FlapCount: 3, FlapWindow: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.AlertRule(ctx, r.ID); got.FlapCount != 3 || got.FlapWindow != 5*time.Minute {
		t.Errorf("rule flap settings = %d %s, want 3 5m", got.FlapCount, got.FlapWindow)
	}
	since := t0.Add(time.Minute).UTC()
	a := cbdash.FiringAlert{RuleID: r.ID, Subject: "checkout/payments", Firing: true, Since: since, Pending: cbdash.AlertFiring}
	if _, ok, err := s.ClaimFiringAlert(ctx, a); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := s.ClaimFlapping(ctx, r.ID, a.Subject, since, "checkout/payments is flapping"); err != nil || ok != want {
			t.Errorf("flapping claim %d = %v (%v), want %v", i, ok, err, want)
		}
	}
	// Claimed, the flapping message is pending until its call completes.
	if kept, err := s.FiringAlerts(ctx); err != nil || len(kept) != 1 || !kept[0].FlappingPending || kept[0].FlappingNow != "checkout/payments is flapping" {
		t.Fatalf("kept after the claim = %+v (%v), want the flapping message pending with its summary", kept, err)
	}
	if err := s.AckFiringAlert(ctx, r.ID, a.Subject, cbdash.AlertFlapping); err != nil {
		t.Fatal(err)
	}
	if kept, err := s.FiringAlerts(ctx); err != nil || len(kept) != 1 || kept[0].FlappingPending || !kept[0].FlappingSince.Equal(since) {
		t.Fatalf("kept after the delivery = %+v (%v), want the flapping message no longer pending, still flapping", kept, err)
	}
	if err := s.AckAlert(ctx, r.ID, a.Subject, "otto", since.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.AckAlert(ctx, r.ID, a.Subject, "vera", since.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.AckAlert(ctx, r.ID, "checkout/search", "otto", since); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("ack of an alert not firing: %v, want not found", err)
	}
	kept, err := s.FiringAlerts(ctx)
	if err != nil || len(kept) != 1 || kept[0].AckedBy != "otto" || !kept[0].AckedAt.Equal(since.Add(time.Minute)) || !kept[0].FlappingSince.Equal(since) {
		t.Fatalf("kept = %+v (%v), want acknowledged by otto first, flapping since the start", kept, err)
	}
	a.Firing, a.Pending = false, cbdash.AlertResolved
	if _, ok, err := s.ResolveFiringAlert(ctx, a, since.Add(3*time.Minute)); err != nil || !ok {
		t.Fatalf("resolve: %v %v", ok, err)
	}
	next := cbdash.FiringAlert{RuleID: r.ID, Subject: a.Subject, Firing: true, Since: since.Add(10 * time.Minute), Pending: cbdash.AlertFiring}
	if _, ok, err := s.ClaimFiringAlert(ctx, next); err != nil || !ok {
		t.Fatalf("claim the next episode: %v %v", ok, err)
	}
	if kept, _ := s.FiringAlerts(ctx); len(kept) != 1 || kept[0].AckedBy != "" || !kept[0].FlappingSince.IsZero() {
		t.Errorf("the next episode = %+v, want it unacknowledged and not flapping", kept)
	}
	if ok, _ := s.ClaimFlapping(ctx, r.ID, a.Subject, next.Since, "again"); !ok {
		t.Error("the next episode's flapping was not claimed")
	}
}
