package store_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
)

func TestAlertRulesCRUD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIncidentStore(t)
	created := t0
	r, err := s.CreateAlertRule(ctx, cbdash.AlertRule{Name: "payments half-open", Service: "checkout", Breaker: "payments",
		Kind: cbdash.AlertHalfOpenLong, For: 45 * time.Second, Hold: time.Minute, WebhookURL: "http://127.0.0.1:9/hook", CreatedAt: created})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == 0 || r.Format != cbdash.FormatJSON {
		t.Fatalf("created %+v: want an ID and the json format by default", r)
	}
	got, err := s.AlertRule(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("AlertRule = %+v, want %+v", got, r)
	}
	r.Format, r.Disabled, r.Margin, r.Kind = cbdash.FormatSlack, true, 5, cbdash.AlertHeadroom
	if err := s.UpdateAlertRule(ctx, r); err != nil {
		t.Fatal(err)
	}
	all, err := s.AlertRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || !reflect.DeepEqual(all[0], r) {
		t.Errorf("AlertRules = %+v, want [%+v]", all, r)
	}
	if err := s.DeleteAlertRule(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AlertRule(ctx, r.ID); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteAlertRule(ctx, r.ID); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if err := s.UpdateAlertRule(ctx, r); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("update of a deleted rule: %v, want ErrNotFound", err)
	}

	for _, bad := range []cbdash.AlertRule{
		{Service: "checkout", Kind: "nope", WebhookURL: "http://127.0.0.1/"},
		{Kind: cbdash.AlertOpen, WebhookURL: "http://127.0.0.1/"},
		{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: "ftp://127.0.0.1/"},
		{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: "http://127.0.0.1/", Format: "xml"},
		{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: "http://127.0.0.1/", Hold: -time.Second},
	} {
		if _, err := s.CreateAlertRule(ctx, bad); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("CreateAlertRule(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestAlertDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIncidentStore(t)
	at := t0
	var want []cbdash.AlertDelivery
	for i, ev := range []string{cbdash.AlertFiring, cbdash.AlertResolved, cbdash.AlertFiring} {
		d := cbdash.AlertDelivery{RuleID: int64(1 + i/2), Subject: "checkout/payments", Event: ev, URL: "http://127.0.0.1:9/",
			Status: 200, Attempts: 1 + i, OK: i != 2, Error: map[bool]string{true: "", false: "gave up"}[i != 2], Body: `{"x":1}`, At: at.Add(time.Duration(i) * time.Second)}
		id, err := s.SaveAlertDelivery(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		d.ID = id
		want = append([]cbdash.AlertDelivery{d}, want...)
	}
	got, err := s.AlertDeliveries(ctx, cbdash.DeliveryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AlertDeliveries =\n%+v\nwant newest first\n%+v", got, want)
	}
	got, _ = s.AlertDeliveries(ctx, cbdash.DeliveryQuery{RuleID: 1, Limit: 1})
	if len(got) != 1 || got[0].ID != want[1].ID {
		t.Errorf("rule 1, limit 1 = %+v, want delivery %d", got, want[1].ID)
	}
}
