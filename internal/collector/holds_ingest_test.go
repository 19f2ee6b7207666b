package collector

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// httpAgent is an agent process that reports over POST /api/v1/ingest,
// as a service without a websocket would.
type httpAgent struct {
	t     *testing.T
	h     *harness
	hello protocol.Hello
	seq   uint64
}

func newHTTPAgent(t *testing.T, h *harness, hello protocol.Hello) *httpAgent {
	return &httpAgent{t: t, h: h, hello: hello}
}

// ingest posts the next batch (one "db" window, and the given command
// results) and returns the commands of the response.
func (a *httpAgent) ingest(results ...protocol.CommandResult) []protocol.Command {
	a.t.Helper()
	a.seq++
	b := a.h.batch(a.seq, 3, 0)
	b.CommandResults = results
	status, body := call(a.t, "POST", a.h.srv.URL+"/api/v1/ingest", a.h.token, protocol.IngestRequest{Hello: a.hello, Batch: b})
	var resp protocol.IngestResponse
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil || resp.AckedSeq != a.seq {
		a.t.Fatalf("ingest %d: %d %s (%v)", a.seq, status, body, err)
	}
	return resp.Commands
}

func gobreakerHello(instance string, startedAt int64) protocol.Hello {
	h := rawHello(instance, startedAt)
	h.Breakers = append(h.Breakers, protocol.BreakerConfig{Name: "search", Library: "sony/gobreaker v2",
		Settings: protocol.NewSettings(map[string]string{"MaxRequests": "1", "Timeout": "30s"}), HoldsUnsupported: true})
	return h
}

func TestHoldsReachInstancesOnHTTPIngestThroughTheirPendingCommands(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	ctx := t.Context()
	old := newHTTPAgent(t, h, rawHello("h1", h.now().Add(-time.Minute).UnixMilli()))
	if cmds := old.ingest(); len(cmds) != 0 {
		t.Fatalf("commands before any hold: %+v", cmds)
	}
	hold, err := h.col.CreateHold(ctx, cbdash.Actor{Name: "ann"}, cbdash.HoldRequest{Selector: cbdash.Selector{Service: cbdash.AnyService, Breaker: "db"},
		Action: protocol.ActionForceOpen, TTL: 10 * time.Minute, Reason: "drill", Actor: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	holdCommand := func(cmds []protocol.Command, action string) protocol.Command {
		t.Helper()
		for _, c := range cmds {
			if id, ok := cbdash.HoldOfCommand(c.ID); ok && id == hold.ID && c.Action == action && c.Breaker == "db" {
				return c
			}
		}
		t.Fatalf("no %s of hold %s among %+v", action, hold.ID, cmds)
		return protocol.Command{}
	}

	// The next ingest carries the hold, and so does every one until the
	// instance answers.
	first := holdCommand(old.ingest(), protocol.ActionForceOpen)
	if first.TTLMillis <= 0 || first.TTLMillis > (10*time.Minute).Milliseconds() {
		t.Errorf("ttl_ms %d, want what remains of 10m", first.TTLMillis)
	}
	if again := holdCommand(old.ingest(), protocol.ActionForceOpen); again.ID != first.ID {
		t.Errorf("redelivered as %s, want the same id %s", again.ID, first.ID)
	}
	answer := protocol.CommandResult{ID: first.ID, Breaker: "db", OK: true, State: protocol.StateForcedOpen, At: h.now().UnixMilli()}
	if cmds := old.ingest(answer); len(cmds) != 0 {
		t.Errorf("commands after the answer: %+v", cmds)
	}

	// An instance started after the hold gets it in its first response,
	// and is reported as joined later.
	late := newHTTPAgent(t, h, rawHello("h2", h.now().Add(time.Millisecond).UnixMilli()))
	holdCommand(late.ingest(), protocol.ActionForceOpen)
	got, err := h.col.Hold(ctx, hold.ID)
	if err != nil {
		t.Fatal(err)
	}
	byInst := map[string]cbdash.HoldCoverage{}
	for _, cv := range got.Coverage {
		byInst[cv.Instance] = cv
	}
	if cv := byInst["h1"]; cv.Status != cbdash.TargetApplied || cv.State != protocol.StateForcedOpen || cv.JoinedLate {
		t.Errorf("h1 coverage %+v, want applied, forced open, not late", cv)
	}
	if cv := byInst["h2"]; cv.Status != cbdash.TargetPending || !cv.JoinedLate {
		t.Errorf("h2 coverage %+v, want pending and joined later", cv)
	}
	if _, ok := byInst["h1"]; !ok || len(got.Coverage) != 2 {
		t.Errorf("coverage %+v, want h1 and h2 (db only)", got.Coverage)
	}

	// A release reaches it at its next ingest.
	if _, err := h.col.ReleaseHold(ctx, cbdash.Actor{Name: "ann"}, hold.ID, "drill over"); err != nil {
		t.Fatal(err)
	}
	rel := holdCommand(old.ingest(), protocol.ActionRelease)
	if rel.Reason != "drill over" || rel.Actor != "ann" {
		t.Errorf("release %+v", rel)
	}
}

func TestBreakersThatCannotBeHeldAreRefusedUpFrontWithTheReason(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	ctx := t.Context()
	g := newHTTPAgent(t, h, gobreakerHello("g1", h.now().UnixMilli()))
	g.ingest()
	const why = "a sony/gobreaker v2 breaker cannot be held open or closed"
	req := cbdash.HoldRequest{Selector: cbdash.Selector{Service: "api", Breaker: "search"}, Action: protocol.ActionForceOpen,
		TTL: time.Minute, Reason: "drill", Actor: "ann"}

	_, err := h.col.CreateHold(ctx, cbdash.Actor{Name: req.Actor}, req)
	if !errors.Is(err, cbdash.ErrInvalid) || !strings.Contains(err.Error(), "api/g1: "+why) {
		t.Errorf("CreateHold: %v, want invalid naming api/g1 and %q", err, why)
	}
	for _, action := range []string{protocol.ActionForceOpen, protocol.ActionRelease, protocol.ActionReset} {
		_, err := h.col.Issue(ctx, cbdash.Actor{Name: "ann"}, cbdash.CommandRequest{Service: "api", Breaker: "search", Action: action, TTL: time.Minute, Reason: "r", Actor: "ann"})
		if !errors.Is(err, cbdash.ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("Issue %s: %v, want invalid with %q", action, err, why)
		}
	}
	cmds, err := h.store.Commands(ctx, cbdash.CommandQuery{})
	if err != nil || len(cmds) != 0 {
		t.Errorf("%d commands recorded (%v), want none", len(cmds), err)
	}

	// Beside a breaker that can be held, a fleet-wide hold is accepted and
	// sent to that one only; the blast radius names the other.
	ok := newHTTPAgent(t, h, rawHello("s1", h.now().UnixMilli()))
	ok.hello.Breakers = append(ok.hello.Breakers, protocol.BreakerConfig{Name: "search", WindowKind: "count", WindowSize: 10,
		FailureRateThreshold: 50, MinimumCalls: 5, OpenDurationMillis: 1000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1})
	ok.ingest()
	req.Selector.Service = cbdash.AnyService
	plan, err := h.col.PlanHold(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(plan.Instances, ",") != "api/s1" || len(plan.Unsupported) != 1 || plan.Unsupported[0] != "api/g1: "+why {
		t.Errorf("plan %+v, want s1 covered and g1 unsupported", plan)
	}
	hold, err := h.col.CreateHold(ctx, cbdash.Actor{Name: req.Actor}, req)
	if err != nil {
		t.Fatal(err)
	}
	if cmds := g.ingest(); len(cmds) != 0 {
		t.Errorf("the gobreaker instance was sent %+v", cmds)
	}
	if cmds := ok.ingest(); len(cmds) != 1 || cmds[0].Breaker != "search" || cmds[0].Action != protocol.ActionForceOpen {
		t.Errorf("s1 was sent %+v, want the force open of search", cmds)
	}
	got, err := h.col.Hold(ctx, hold.ID)
	if err != nil || len(got.Coverage) != 1 || got.Coverage[0].Instance != "s1" {
		t.Errorf("coverage %+v (%v), want s1 only", got.Coverage, err)
	}
}
