package holds

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// An advisory is a hold of the quorum's own: it reaches only the
// instances it names, takes none of the server's default stop conditions
// (it is no drill), and is refused under any other actor or form.
func TestAnAdvisoryIsAHoldWithoutADrillsStopConditions(t *testing.T) {
	s := newDrillSim(t, 3, cbdash.StopCondition{Metric: cbdash.StopErrorRate, Above: 30})
	ctx := context.Background()
	req := cbdash.HoldRequest{Selector: cbdash.Selector{Service: "pricing", Breaker: "db", Instances: []string{"i1", "i2"}},
		Action: protocol.ActionForceOpen, TTL: 5 * time.Second, Reason: "quorum: 3 of 4", Actor: cbdash.QuorumActor}
	h, err := s.m.Advise(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Stops) != 0 || len(h.Coverage) != 2 {
		t.Errorf("stops %v, coverage %d; want none and 2", h.Stops, len(h.Coverage))
	}
	for k, c := range s.conns {
		got, _ := c.delivered()
		if want := map[string]int{"i0": 0, "i1": 1, "i2": 1}[k.Instance]; len(got) != want {
			t.Errorf("%s got %d commands, want %d", k.Instance, len(got), want)
		}
		for _, cmd := range got {
			if cmd.Actor != cbdash.QuorumActor || cmd.TTL != 5*time.Second {
				t.Errorf("%s got %+v, want the quorum's 5s force_open", k.Instance, cmd)
			}
		}
	}
	for name, bad := range map[string]func(r *cbdash.HoldRequest){
		"an operator's actor": func(r *cbdash.HoldRequest) { r.Actor = "ann" },
		"force closed":        func(r *cbdash.HoldRequest) { r.Action = protocol.ActionForceClosed },
		"stop conditions":     func(r *cbdash.HoldRequest) { r.StopIf = []cbdash.StopCondition{{Metric: cbdash.StopP99, Above: 5}} },
		"no ttl":              func(r *cbdash.HoldRequest) { r.TTL = 0 },
	} {
		r := req
		bad(&r)
		if _, err := s.m.Advise(ctx, r); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
}
