package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func command(id string, issued time.Time, targets ...string) cbdash.Command {
	c := cbdash.Command{ID: id, CommandRequest: cbdash.CommandRequest{Service: "pay", Breaker: "db",
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "db failover", Actor: "alice"},
		IssuedAt: issued, ExpiresAt: issued.Add(10 * time.Minute), Targets: []cbdash.CommandTarget{}}
	for _, t := range targets {
		c.Targets = append(c.Targets, cbdash.CommandTarget{Instance: t, Status: cbdash.TargetPending})
	}
	return c
}

func TestCommandsAreRecordedAndTheirResultsApplied(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	c1 := command("c1", t0, "pay-1", "pay-2")
	if err := s.CreateCommand(ctx, c1); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateCommand(ctx, c1); !errors.Is(err, cbdash.ErrConflict) {
		t.Fatalf("second CreateCommand of c1: %v, want ErrConflict", err)
	}
	got, err := s.Command(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if got.CommandRequest != c1.CommandRequest || !got.IssuedAt.Equal(t0) || !got.ExpiresAt.Equal(c1.ExpiresAt) || len(got.Targets) != 2 {
		t.Fatalf("Command(c1) = %+v, want %+v", got, c1)
	}

	// pay-1 answers in a batch; pay-2 is offline.
	res := protocol.CommandResult{ID: "c1", Breaker: "db", OK: true, State: protocol.StateForcedOpen, At: t0.Add(time.Second).UnixMilli()}
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, CommandResults: []protocol.CommandResult{res}})
	got, _ = s.Command(ctx, "c1")
	want := []cbdash.CommandTarget{
		{Instance: "pay-1", Status: cbdash.TargetApplied, State: protocol.StateForcedOpen, At: t0.Add(time.Second)},
		{Instance: "pay-2", Status: cbdash.TargetPending}}
	for i := range want {
		if g := got.Targets[i]; g.Instance != want[i].Instance || g.Status != want[i].Status || g.State != want[i].State || !g.At.Equal(want[i].At) {
			t.Errorf("target %d = %+v, want %+v", i, g, want[i])
		}
	}

	for _, c := range []struct {
		name     string
		instance string
		now      time.Time
		want     int
	}{
		{"answered instance has nothing pending", "pay-1", t0.Add(time.Minute), 0},
		{"offline instance gets it on reconnect", "pay-2", t0.Add(time.Minute), 1},
		{"not after it expired", "pay-2", t0.Add(11 * time.Minute), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := s.PendingCommands(ctx, "pay", c.instance, c.now)
			if err != nil || len(p) != c.want {
				t.Fatalf("PendingCommands = %d, %v; want %d", len(p), err, c.want)
			}
		})
	}
	if err := s.SetCommandTarget(ctx, "c1", cbdash.CommandTarget{Instance: "pay-2", Status: cbdash.TargetExpired, At: t0.Add(11 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCommandTarget(ctx, "nope", cbdash.CommandTarget{Instance: "pay-2", Status: cbdash.TargetExpired}); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("SetCommandTarget of unknown command: %v, want ErrNotFound", err)
	}
	if _, err := s.Command(ctx, "nope"); !errors.Is(err, cbdash.ErrNotFound) {
		t.Fatalf("Command(nope): %v, want ErrNotFound", err)
	}
}

func TestCommandsListNewestFirstAndFilter(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	ctx := context.Background()
	for i, id := range []string{"a", "b", "c"} {
		c := command(id, t0.Add(time.Duration(i)*time.Minute), "pay-1")
		if id == "b" {
			c.Breaker = "psp"
		}
		if err := s.CreateCommand(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		q    cbdash.CommandQuery
		want []string
	}{
		{"all", cbdash.CommandQuery{}, []string{"c", "b", "a"}},
		{"one breaker", cbdash.CommandQuery{Service: "pay", Breaker: "db"}, []string{"c", "a"}},
		{"limit", cbdash.CommandQuery{Limit: 1}, []string{"c"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.Commands(ctx, c.q)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, g := range got {
				ids = append(ids, g.ID)
				if len(g.Targets) != 1 {
					t.Errorf("%s has %d targets, want 1", g.ID, len(g.Targets))
				}
			}
			if len(ids) != len(c.want) {
				t.Fatalf("ids = %v, want %v", ids, c.want)
			}
			for i := range ids {
				if ids[i] != c.want[i] {
					t.Fatalf("ids = %v, want %v", ids, c.want)
				}
			}
		})
	}
}

func TestCommandAuditLogRefusesDeletes(t *testing.T) {
	t.Parallel()
	s, path := openStore(t, store.Options{})
	if err := s.CreateCommand(context.Background(), command("c1", t0, "pay-1")); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	for _, q := range []string{"DELETE FROM command_targets", "DELETE FROM commands"} {
		if _, err := db.Exec(q); err == nil {
			t.Errorf("%s succeeded; the audit log must be append-only", q)
		}
	}
}

func TestCreateCommandRefusesInvalidInput(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	for name, mut := range map[string]func(*cbdash.Command){
		"no id":          func(c *cbdash.Command) { c.ID = "" },
		"no service":     func(c *cbdash.Command) { c.Service = "" },
		"unknown action": func(c *cbdash.Command) { c.Action = "explode" },
		"bad status":     func(c *cbdash.Command) { c.Targets[0].Status = "maybe" },
	} {
		t.Run(name, func(t *testing.T) {
			c := command("x", t0, "pay-1")
			mut(&c)
			if err := s.CreateCommand(context.Background(), c); !errors.Is(err, cbdash.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}
