package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
)

// TestCreateIncidentOfAStoredEpisodeReturnsTheStoredOne: a second insert
// of the same dependency and start (a replay, or a second leader) writes
// nothing and returns the first incident's ID, also from a second store on
// the same database (two collectors); another start is another incident.
func TestCreateIncidentOfAStoredEpisodeReturnsTheStoredOne(t *testing.T) {
	t.Parallel()
	dsn := storetest.Path(t)
	a := storetest.OpenFile(t, dsn, store.Options{})
	b := storetest.OpenFile(t, dsn, store.Options{})
	ctx := context.Background()
	inc := cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "pay", Breaker: "db"}, Start: t0, Open: true, Instances: []string{"pay-1"}, Opens: 1}
	id1, err := a.CreateIncident(ctx, inc)
	if err != nil {
		t.Fatal(err)
	}
	again := inc
	again.Instances, again.Opens = []string{"pay-1", "pay-2"}, 2
	id2, err := b.CreateIncident(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if id2 != id1 {
		t.Fatalf("second create of the same episode got id %d, want the stored %d", id2, id1)
	}
	later := inc
	later.Start = t0.Add(time.Millisecond)
	id3, err := a.CreateIncident(ctx, later)
	if err != nil || id3 == id1 {
		t.Fatalf("another start: id %d (first %d), err %v", id3, id1, err)
	}
	all, err := a.Incidents(ctx, cbdash.IncidentQuery{})
	if err != nil || len(all) != 2 {
		t.Fatalf("incidents = %d, %v; want 2", len(all), err)
	}
	got, err := a.Incident(ctx, id1)
	if err != nil || got.Opens != 1 {
		t.Fatalf("the stored incident was changed by the refused insert: %+v, %v", got, err)
	}
}

// TestLeaderMarkOnlyMovesForward: the mark starts unknown, is kept, and an
// earlier mark (a leader that lags) does not move it back.
func TestLeaderMarkOnlyMovesForward(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	if _, ok, err := s.LeaderMark(ctx, "incidents"); ok || err != nil {
		t.Fatalf("fresh mark: ok %v err %v", ok, err)
	}
	for _, at := range []time.Time{t0.Add(2 * time.Second), t0} {
		if err := s.SetLeaderMark(ctx, "incidents", at); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := s.LeaderMark(ctx, "incidents")
	if err != nil || !ok || !got.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("mark = %v %v %v, want %v", got, ok, err, t0.Add(2*time.Second))
	}
}

// TestClaimFiringAlertOncePerEpisode: the first claim of an alert wins; a
// second (another leader, another start) gets the firing state; after the
// resolve a claim within the resolved episode is refused, and one after it
// is a new episode. A resolve claims once.
func TestClaimFiringAlertOncePerEpisode(t *testing.T) {
	t.Parallel()
	dsn := storetest.Path(t)
	a := storetest.OpenFile(t, dsn, store.Options{})
	b := storetest.OpenFile(t, dsn, store.Options{})
	ctx := context.Background()
	fa := cbdash.FiringAlert{RuleID: 7, Subject: "pay/db", Firing: true, Since: t0, Detail: "open", Pending: cbdash.AlertFiring}
	if _, ok, err := a.ClaimFiringAlert(ctx, fa); !ok || err != nil {
		t.Fatalf("first claim: %v %v", ok, err)
	}
	second := fa
	second.Since = t0.Add(time.Second)
	got, ok, err := b.ClaimFiringAlert(ctx, second)
	if ok || err != nil || !got.Since.Equal(t0) || !got.Firing {
		t.Fatalf("second claim: %+v %v %v; want the firing state since %v", got, ok, err, t0)
	}
	res := cbdash.FiringAlert{RuleID: 7, Subject: "pay/db", Since: t0, Detail: "resolved: open", Pending: cbdash.AlertResolved}
	at := t0.Add(3 * time.Minute)
	for i, s := range []*store.Store{a, b} {
		prev, ok, err := s.ResolveFiringAlert(ctx, res, at)
		if err != nil || ok != (i == 0) || prev != map[bool]string{true: cbdash.AlertFiring}[i == 0] {
			t.Fatalf("resolve %d: %v %q %v; want the first claimed, pending the firing before", i, ok, prev, err)
		}
	}
	inside := fa
	inside.Since = t0.Add(time.Minute)
	if got, ok, err := a.ClaimFiringAlert(ctx, inside); ok || err != nil || got.Firing {
		t.Fatalf("claim within the resolved episode: %+v %v %v; want refused", got, ok, err)
	}
	after := fa
	after.Since = at.Add(time.Millisecond)
	if _, ok, err := b.ClaimFiringAlert(ctx, after); !ok || err != nil {
		t.Fatalf("claim after the episode: %v %v", ok, err)
	}
}

// TestAlertEpisodesExpireWithTheTransitions: a resolved alert episode is
// kept (a replayed trip within it fires nothing) while its transitions
// may still be replayed, and removed by Compact once past the
// transitions' retention, and with its rule: the table does not grow
// for ever.
func TestAlertEpisodesExpireWithTheTransitions(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{Retention: store.Retention{Transitions: 24 * time.Hour}})
	ctx := context.Background()
	episode := func(rule int64) {
		t.Helper()
		fa := cbdash.FiringAlert{RuleID: rule, Subject: "pay/db", Firing: true, Since: t0, Detail: "open", Pending: cbdash.AlertFiring}
		if _, ok, err := s.ClaimFiringAlert(ctx, fa); !ok || err != nil {
			t.Fatalf("claim: %v %v", ok, err)
		}
		res := cbdash.FiringAlert{RuleID: rule, Subject: "pay/db", Since: t0, Detail: "resolved: open", Pending: cbdash.AlertResolved}
		if _, ok, err := s.ResolveFiringAlert(ctx, res, t0.Add(time.Minute)); !ok || err != nil {
			t.Fatalf("resolve: %v %v", ok, err)
		}
	}
	kept := func(rule int64) bool {
		t.Helper()
		inside := cbdash.FiringAlert{RuleID: rule, Subject: "pay/db", Firing: true, Since: t0.Add(time.Second), Detail: "open", Pending: cbdash.AlertFiring}
		_, claimed, err := s.ClaimFiringAlert(ctx, inside)
		if err != nil {
			t.Fatal(err)
		}
		return !claimed
	}
	episode(1000)
	if err := s.Compact(ctx, t0.Add(23*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !kept(1000) {
		t.Fatal("an episode within the transitions' retention was forgotten: its replayed trip fired again")
	}
	if err := s.Compact(ctx, t0.Add(25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if kept(1000) {
		t.Fatal("an episode past the transitions' retention was kept")
	}

	r, err := s.CreateAlertRule(ctx, cbdash.AlertRule{Name: "open", Service: "pay", Kind: cbdash.AlertOpen, WebhookURL: "https://hooks.example/x", Hold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	episode(r.ID)
	if err := s.DeleteAlertRule(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if kept(r.ID) {
		t.Fatal("the episodes of a deleted rule were kept")
	}
}
