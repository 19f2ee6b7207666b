package store_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
)

func TestFiringAlertsArePutAcknowledgedAndSurviveAReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIncidentStore(t)
	r, err := s.CreateAlertRule(ctx, cbdash.AlertRule{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: "http://127.0.0.1:9/hook"})
	if err != nil {
		t.Fatal(err)
	}
	since := t0.Add(time.Minute).UTC()
	a := cbdash.FiringAlert{RuleID: r.ID, Subject: "checkout/payments", Firing: true, Since: since, Detail: "open on 1 of 2", Pending: cbdash.AlertFiring}
	b := cbdash.FiringAlert{RuleID: r.ID, Subject: "checkout/search", Firing: true, Since: since, Pending: cbdash.AlertFiring}
	for _, x := range []cbdash.FiringAlert{a, b} {
		if err := s.PutFiringAlert(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	// payments delivered; search resolved before its firing was acknowledged.
	if err := s.AckFiringAlert(ctx, r.ID, a.Subject, cbdash.AlertFiring); err != nil {
		t.Fatal(err)
	}
	b.Firing, b.Pending = false, cbdash.AlertResolved
	if err := s.PutFiringAlert(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.AckFiringAlert(ctx, r.ID, b.Subject, cbdash.AlertFiring); err != nil { // late: must not clear the resolve
		t.Fatal(err)
	}
	a.Pending = ""
	got, err := s.FiringAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []cbdash.FiringAlert{a, b}; !reflect.DeepEqual(got, want) {
		t.Fatalf("FiringAlerts = %+v\nwant %+v", got, want)
	}
	if err := s.AckFiringAlert(ctx, r.ID, b.Subject, cbdash.AlertResolved); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.FiringAlerts(ctx); len(got) != 1 || got[0].Subject != a.Subject {
		t.Fatalf("after the resolve was delivered: %+v, want only %s", got, a.Subject)
	}
	if err := s.AckFiringAlert(ctx, r.ID, a.Subject, "bogus"); err == nil {
		t.Error("an unknown event was accepted")
	}
	if err := s.DeleteAlertRule(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.FiringAlerts(ctx); len(got) != 0 {
		t.Fatalf("a deleted rule's alerts remain: %+v", got)
	}
}
