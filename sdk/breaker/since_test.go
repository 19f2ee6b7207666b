package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// Snapshot.Since is when the breaker entered its state: its creation, each
// transition's time (a lazily seen open > half_open at the moment it
// became due), and unchanged by a reset that makes no transition.
func TestSnapshotSince(t *testing.T) {
	clk := breakertest.NewEpochClock()
	made := clk.Now()
	b := mustNew(t, "since", breaker.Config{MinimumCalls: 1, OpenDuration: time.Second, Clock: clk})
	clk.Advance(time.Second)
	if s := b.Snapshot(); !s.Since.Equal(made) {
		t.Errorf("closed since %v, want its creation %v", s.Since, made)
	}
	if _, err := b.Apply(breaker.Command{Action: breaker.ActionReset}); err != nil {
		t.Fatal(err)
	}
	if s := b.Snapshot(); !s.Since.Equal(made) {
		t.Errorf("after a reset of a closed breaker: since %v, want %v", s.Since, made)
	}
	tripped := clk.Now()
	_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	clk.Advance(5 * time.Second)
	if s := b.Snapshot(); s.State != breaker.HalfOpen || !s.Since.Equal(tripped.Add(time.Second)) {
		t.Errorf("%v since %v, want half_open since the open duration ran out (%v)", s.State, s.Since, tripped.Add(time.Second))
	}
}
