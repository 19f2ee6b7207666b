package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestACommandResultOfAnotherServiceChangesNothing(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	if err := s.CreateCommand(ctx, command("c1", t0, "pay-1")); err != nil { // a command of service pay
		t.Fatal(err)
	}
	res := protocol.CommandResult{ID: "c1", Breaker: "db", OK: true, State: protocol.StateForcedOpen, At: t0.Add(time.Second).UnixMilli()}
	// An instance named pay-1 in service other answers it.
	mustSave(t, s, "other", "pay-1", 1, protocol.Batch{Seq: 1, CommandResults: []protocol.CommandResult{res}})
	got, err := s.Command(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if st := got.Targets[0].Status; st != cbdash.TargetPending {
		t.Errorf("after a result from service other the target is %s, want pending", st)
	}
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, CommandResults: []protocol.CommandResult{res}})
	got, _ = s.Command(ctx, "c1")
	if st := got.Targets[0].Status; st != cbdash.TargetApplied {
		t.Errorf("after its own instance answered the target is %s, want applied", st)
	}
}

func TestACommandResultNamingAnotherBreakerChangesNothing(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	cmd := command("c1", t0, "pay-1")
	if err := s.CreateCommand(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	other := "not-" + cmd.Breaker
	res := protocol.CommandResult{ID: "c1", Breaker: other, OK: true, State: protocol.StateForcedOpen, At: t0.Add(time.Second).UnixMilli()}
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, CommandResults: []protocol.CommandResult{res}})
	got, err := s.Command(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if st := got.Targets[0].Status; st != cbdash.TargetPending {
		t.Errorf("after a result naming breaker %s the target of a command for %s is %s, want pending", other, cmd.Breaker, st)
	}
	res.Breaker = cmd.Breaker
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 2, CommandResults: []protocol.CommandResult{res}})
	got, _ = s.Command(ctx, "c1")
	if st := got.Targets[0].Status; st != cbdash.TargetApplied {
		t.Errorf("after a result naming its breaker the target is %s, want applied", st)
	}
}
