package incident_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

func TestNotes(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	id, err := st.CreateIncident(ctx, cbdash.Incident{DependencyKey: k, Start: t0, End: t0.Add(time.Minute), Instances: []string{"a"}, Opens: 1, FirstInstance: "a"})
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(2 * time.Minute)
	notes := incident.NewNotes(st, breakertest.NewClock(now))
	ann := cbdash.Actor{Name: "ann", Role: cbdash.RoleOperator, Kind: cbdash.ActorToken}

	t.Run("a note is stored by its actor at the clock's time", func(t *testing.T) {
		n, err := notes.AddNote(ctx, ann, id, "  rolled back payments ")
		if err != nil {
			t.Fatal(err)
		}
		if n.Author != "ann" || n.Text != "rolled back payments" || !n.At.Equal(now) {
			t.Fatalf("note %+v", n)
		}
		inc, err := st.Incident(ctx, id)
		if err != nil || len(inc.Notes) != 1 || inc.Notes[0].Author != "ann" {
			t.Fatalf("stored: %v %+v", err, inc.Notes)
		}
	})
	for _, tt := range []struct {
		name  string
		actor cbdash.Actor
		id    int64
		text  string
		want  error
	}{
		{"an empty note is refused", ann, id, "   ", cbdash.ErrInvalid},
		{"a note over the limit is refused", ann, id, strings.Repeat("x", incident.MaxNoteLen+1), cbdash.ErrInvalid},
		{"a note by nobody is refused", cbdash.Actor{}, id, "x", cbdash.ErrInvalid},
		{"a note on an unknown incident is not found", ann, id + 100, "x", cbdash.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := notes.AddNote(ctx, tt.actor, tt.id, tt.text); !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
		})
	}
}
