package store_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// openIncidentStore opens a real SQLite file in a temp dir, on a virtual
// clock at t0.
func openIncidentStore(t *testing.T) *store.Store {
	t.Helper()
	return storetest.Open(t, clockAt(t0))
}

func TestIncidentsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIncidentStore(t)
	base := t0
	pay := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	inv := cbdash.DependencyKey{Service: "checkout", Breaker: "inventory"}
	cause := protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50, WindowCalls: 20, WindowFailed: 12}

	first := cbdash.Incident{DependencyKey: pay, Start: base, Open: true, Instances: []string{"a"}, Opens: 1, FirstInstance: "a", FirstCause: cause}
	id1, err := s.CreateIncident(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	first.ID = id1
	first.Instances = []string{"a", "b"}
	first.Opens = 3
	first.Open = false
	first.End = base.Add(90 * time.Second)
	if err := s.UpdateIncident(ctx, first); err != nil {
		t.Fatal(err)
	}
	id2, err := s.CreateIncident(ctx, cbdash.Incident{DependencyKey: inv, Start: base.Add(10 * time.Minute), Open: true, Instances: []string{"c"}, Opens: 1, FirstInstance: "c"})
	if err != nil {
		t.Fatal(err)
	}

	got, err := s.Incident(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, first) {
		t.Errorf("Incident(%d) =\n%+v\nwant\n%+v", id1, got, first)
	}

	ids := func(q cbdash.IncidentQuery) []int64 {
		t.Helper()
		list, err := s.Incidents(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, i := range list {
			out = append(out, i.ID)
		}
		return out
	}
	for _, tt := range []struct {
		name string
		q    cbdash.IncidentQuery
		want []int64
	}{
		{"all, newest first", cbdash.IncidentQuery{}, []int64{id2, id1}},
		{"by breaker", cbdash.IncidentQuery{Service: "checkout", Breaker: "payments"}, []int64{id1}},
		{"other service", cbdash.IncidentQuery{Service: "search"}, nil},
		{"open only", cbdash.IncidentQuery{OpenOnly: true}, []int64{id2}},
		{"overlapping a range inside the first", cbdash.IncidentQuery{From: base.Add(time.Minute), To: base.Add(2 * time.Minute)}, []int64{id1}},
		{"after the first ended: only the open one", cbdash.IncidentQuery{From: base.Add(5 * time.Minute)}, []int64{id2}},
		{"before anything", cbdash.IncidentQuery{To: base}, nil},
		{"limit", cbdash.IncidentQuery{Limit: 1}, []int64{id2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ids(tt.q); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("notes come back oldest first with the incident", func(t *testing.T) {
		for i, text := range []string{"rolled back payments v2", "paged the payments team"} {
			if _, err := s.AddIncidentNote(ctx, cbdash.IncidentNote{IncidentID: id1, At: base.Add(time.Duration(2-i) * time.Minute), Author: "ann", Text: text}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Incident(ctx, id1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Notes) != 2 || got.Notes[0].Text != "paged the payments team" || got.Notes[1].Author != "ann" {
			t.Errorf("notes = %+v", got.Notes)
		}
	})
	t.Run("errors", func(t *testing.T) {
		if _, err := s.Incident(ctx, 999); !errors.Is(err, cbdash.ErrNotFound) {
			t.Errorf("Incident(999): %v, want ErrNotFound", err)
		}
		if err := s.UpdateIncident(ctx, cbdash.Incident{ID: 999, DependencyKey: pay}); !errors.Is(err, cbdash.ErrNotFound) {
			t.Errorf("UpdateIncident(999): %v, want ErrNotFound", err)
		}
		if _, err := s.AddIncidentNote(ctx, cbdash.IncidentNote{IncidentID: 999, Text: "x"}); !errors.Is(err, cbdash.ErrNotFound) {
			t.Errorf("AddIncidentNote(999): %v, want ErrNotFound", err)
		}
		if _, err := s.AddIncidentNote(ctx, cbdash.IncidentNote{IncidentID: id1, Text: "  "}); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("AddIncidentNote(empty): %v, want ErrInvalid", err)
		}
	})
}

func TestConfigChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIncidentStore(t)
	base := t0
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	want := cbdash.ConfigChange{DependencyKey: k, Instance: "a", At: base.Add(time.Minute),
		Previous: protocol.BreakerConfig{Name: "payments", FailureRateThreshold: 50}, Config: protocol.BreakerConfig{Name: "payments", FailureRateThreshold: 40}}
	id, err := s.SaveConfigChange(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	want.ID = id
	if _, err := s.SaveConfigChange(ctx, cbdash.ConfigChange{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "other"}, Instance: "a", At: base.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ConfigChanges(ctx, k, base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("ConfigChanges = %+v, want [%+v]", got, want)
	}
	if got, _ := s.ConfigChanges(ctx, k, base.Add(2*time.Minute), base.Add(time.Hour)); len(got) != 0 {
		t.Errorf("outside the range: %+v", got)
	}
}
