package web_test

// The security regression suite, trust boundaries (issue 13, items 7 and
// 8): what one agent token says is believed only about its own service
// and instances.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ingestWith posts req to POST /api/v1/ingest with token and returns the
// status and body.
func (h *harness) ingestWith(token string, req protocol.IngestRequest) (int, string) {
	h.t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodPost, h.url+"/api/v1/ingest", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw)
}

// rawAgent is an agent speaking the protocol on a websocket by hand.
type rawAgent struct {
	t    *testing.T
	conn *websocket.Conn
	seq  uint64
}

// dialAgent connects to the harness's agent endpoint with token, says
// hello and reads the welcome; its batches are numbered after the last
// one stored for the process.
func (h *harness) dialAgent(token string, hi protocol.Hello) *rawAgent {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/api/v1/agent", &websocket.DialOptions{
		Subprotocols: []string{protocol.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.CloseNow() })
	if err := wsjson.Write(ctx, conn, hi); err != nil {
		h.t.Fatal(err)
	}
	a := &rawAgent{t: h.t, conn: conn}
	typ, raw := a.next(ctx)
	var w protocol.Welcome
	if err := json.Unmarshal(raw, &w); typ != protocol.TypeWelcome || err != nil {
		h.t.Fatalf("hello of %s/%s: %s", hi.Service, hi.Instance, raw)
	}
	a.seq = w.LastSeq // batches go on after what is stored
	return a
}

// next reads the next message, returning its type and the raw JSON.
func (a *rawAgent) next(ctx context.Context) (string, []byte) {
	a.t.Helper()
	_, raw, err := a.conn.Read(ctx)
	if err != nil {
		a.t.Fatalf("agent read: %v", err)
	}
	var m struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &m)
	return m.Type, raw
}

// send sends b as the next batch (seq and sent_at set) and returns the
// collector's answer to it: "ack" or the error's JSON. Commands the
// collector sends meanwhile are skipped.
func (a *rawAgent) send(b protocol.Batch, now time.Time) string {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(a.t.Context(), 10*time.Second)
	defer cancel()
	a.seq++
	b.Type, b.Seq, b.SentAt = protocol.TypeBatch, a.seq, now.UnixMilli()
	if err := wsjson.Write(ctx, a.conn, b); err != nil {
		a.t.Fatal(err)
	}
	for {
		switch typ, raw := a.next(ctx); typ {
		case protocol.TypeAck:
			var ack protocol.Ack
			_ = json.Unmarshal(raw, &ack)
			if ack.Seq >= a.seq {
				return "ack"
			}
		case protocol.TypeError:
			return string(raw)
		}
	}
}

// targetStatus is the status of instance's target of command id.
func (h *harness) targetStatus(id, instance string) string {
	h.t.Helper()
	cmd, err := h.st.Command(h.t.Context(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, t := range cmd.Targets {
		if t.Instance == instance {
			return t.Status
		}
	}
	return "no target"
}

func TestSecurityCommandResultsOnlyFromTheCommandsInstance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, quiet(dep("billing", "payments", 1, 0)))
	ctx := t.Context()
	attacker, err := h.st.CreateAgentToken(ctx, "attacker")
	if err != nil {
		t.Fatal(err)
	}
	issue := func() cbdash.Command {
		t.Helper()
		cmd, err := h.col.Issue(ctx, cbdash.Actor{Name: "otto"}, cbdash.CommandRequest{Service: "billing", Breaker: "payments",
			Action: protocol.ActionReset, Reason: "stuck", Actor: "otto"})
		if err != nil {
			t.Fatal(err)
		}
		if got := h.targetStatus(cmd.ID, "billing-1"); got != cbdash.TargetPending {
			t.Fatalf("a fresh command's target is %s", got)
		}
		return cmd
	}
	forged := func(cmd cbdash.Command) protocol.Batch {
		return protocol.Batch{CommandResults: []protocol.CommandResult{{ID: cmd.ID, Breaker: "payments", OK: true,
			State: protocol.StateClosed, At: h.clock.Now().UnixMilli()}}}
	}
	// The attacker's instance has the name of the target, in its own service.
	hi := hello("attacker", "billing-1", []string{"payments"})

	t.Run("over HTTP ingest, an agent of another service cannot answer a command", func(t *testing.T) {
		cmd := issue()
		b := forged(cmd)
		b.Type, b.Seq, b.SentAt = protocol.TypeBatch, 1, h.clock.Now().UnixMilli()
		if status, body := h.ingestWith(attacker, protocol.IngestRequest{Hello: hi, Batch: b}); status != http.StatusOK {
			t.Fatalf("ingest = %d %s", status, body)
		}
		if got := h.targetStatus(cmd.ID, "billing-1"); got != cbdash.TargetPending {
			t.Errorf("after a forged ok from service attacker the target is %s, want still pending", got)
		}
	})
	t.Run("over the websocket, an agent of another service cannot answer a command", func(t *testing.T) {
		cmd := issue()
		wsHello := hi
		wsHello.StartedAt++ // another process of the attacker's instance
		a := h.dialAgent(attacker, wsHello)
		if got := a.send(forged(cmd), h.clock.Now()); got != "ack" {
			t.Fatalf("batch = %s", got)
		}
		if got := h.targetStatus(cmd.ID, "billing-1"); got != cbdash.TargetPending {
			t.Errorf("after a forged ok over the websocket the target is %s, want still pending", got)
		}
	})
	t.Run("an instance of the command's service cannot answer for another instance", func(t *testing.T) {
		cmd := issue()
		h.report("billing", "payments", "billing-2", protocol.StateClosed) // declares its breaker
		h.ingest("billing", "billing-2", forged(cmd))
		if got := h.targetStatus(cmd.ID, "billing-1"); got != cbdash.TargetPending {
			t.Errorf("after billing-2 answered billing-1's command the target is %s", got)
		}
	})
	t.Run("the command's own instance cannot answer it for another breaker", func(t *testing.T) {
		cmd := issue()
		b := forged(cmd)
		b.CommandResults[0].Breaker = "ledger"
		h.ingest("billing", "billing-1", b)
		if got := h.targetStatus(cmd.ID, "billing-1"); got != cbdash.TargetPending {
			t.Errorf("after billing-1 answered a command for payments with a result for ledger, the target is %s, want still pending", got)
		}
	})
	t.Run("the command's own instance answers it", func(t *testing.T) {
		cmd := issue()
		h.ingest("billing", "billing-1", forged(cmd))
		if got := h.targetStatus(cmd.ID, "billing-1"); got != cbdash.TargetApplied {
			t.Errorf("after billing-1 answered, the target is %s, want applied", got)
		}
	})
	t.Run("the refusals are counted", func(t *testing.T) {
		res, err := http.Get(h.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if want := `cbdash_collector_agent_refused_total{reason="foreign_command_result"} 4`; !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	})
}

func TestSecurityACommandCauseIsBelievedOnlyForACommandTheCollectorSent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, quiet(dep("checkout", "payments", 2, 0)))
	ctx := t.Context()
	base := h.clock.Now()
	at := func(d time.Duration) int64 { return base.Add(d).UnixMilli() }
	// checkout-1 claims an operator forced it open: admin, with a command
	// id cbdash never issued.
	h.ingest("checkout", "checkout-1", protocol.Batch{Transitions: []protocol.Transition{{Breaker: "payments",
		From: protocol.StateClosed, To: protocol.StateForcedOpen, At: at(-400 * time.Millisecond),
		Cause: protocol.Cause{Kind: protocol.CauseCommand, CommandID: "0123456789abcdef01234567", Action: protocol.ActionForceOpen,
			Actor: "admin", Reason: "maintenance"}}}})
	// A real command for checkout-1, answered with a transition naming it.
	cmd, err := h.col.Issue(ctx, cbdash.Actor{Name: "otto"}, cbdash.CommandRequest{Service: "checkout", Breaker: "payments", Instance: "checkout-1",
		Action: protocol.ActionReset, Reason: "back to normal", Actor: "otto"})
	if err != nil {
		t.Fatal(err)
	}
	h.ingest("checkout", "checkout-1", protocol.Batch{Transitions: []protocol.Transition{{Breaker: "payments",
		From: protocol.StateForcedOpen, To: protocol.StateClosed, At: at(-300 * time.Millisecond),
		Cause: protocol.Cause{Kind: protocol.CauseCommand, CommandID: cmd.ID, Action: protocol.ActionReset, Actor: "otto", Reason: "back to normal"}}}})
	// checkout-2, over the websocket, names checkout-1's real command.
	a := h.dialAgent(h.stack.AgentToken, hello("checkout", "checkout-2", []string{"payments"}))
	if got := a.send(protocol.Batch{Transitions: []protocol.Transition{{Breaker: "payments",
		From: protocol.StateClosed, To: protocol.StateForcedClosed, At: at(-200 * time.Millisecond),
		Cause: protocol.Cause{Kind: protocol.CauseCommand, CommandID: cmd.ID, Action: protocol.ActionForceClosed, Actor: "ada"}}, {Breaker: "payments",
		// and claims a quorum advisory cbdash never sent.
		From: protocol.StateForcedClosed, To: protocol.StateForcedOpen, At: at(-100 * time.Millisecond),
		Cause: protocol.Cause{Kind: protocol.CauseQuorum, CommandID: "feedfacefeedfacefeedface", Action: protocol.ActionForceOpen, Actor: cbdash.QuorumActor}}}}, h.clock.Now()); got != "ack" {
		t.Fatalf("batch = %s", got)
	}

	t.Run("stored as agent-reported unless the collector sent the command to that instance", func(t *testing.T) {
		recs, err := h.st.Transitions(ctx, cbdash.TransitionQuery{Service: "checkout", Breaker: "payments", From: base.Add(-time.Second), To: base.Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range recs {
			got[r.Instance+" "+r.To] = r.Cause.Kind
		}
		for k, want := range map[string]string{
			"checkout-1 " + protocol.StateForcedOpen:   protocol.CauseAgentCommand,
			"checkout-1 " + protocol.StateClosed:       protocol.CauseCommand,
			"checkout-2 " + protocol.StateForcedClosed: protocol.CauseAgentCommand,
			"checkout-2 " + protocol.StateForcedOpen:   protocol.CauseAgentCommand,
		} {
			if got[k] != want {
				t.Errorf("the cause of %s is %q, want %q (all: %v)", k, got[k], want, got)
			}
		}
	})
	const shown = "agent-reported command force open, not sent by cbdash (the agent says by admin; reason: maintenance)"
	t.Run("the dependency's transition log shows it as the agent's word", func(t *testing.T) {
		body := h.login("vera").get("/dependency?service=checkout&breaker=payments").body
		if !strings.Contains(body, shown) {
			t.Errorf("the dependency page lacks %q", shown)
		}
		if strings.Contains(body, "command force open by admin") {
			t.Error("the dependency page shows the forged command as admin's")
		}
		if !strings.Contains(body, "command reset by otto") {
			t.Error("the dependency page does not show otto's real command as his")
		}
	})
	t.Run("the incident timeline and its export show it as the agent's word", func(t *testing.T) {
		inc := cbdash.Incident{DependencyKey: cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}, Start: base.Add(-time.Second),
			End: base, Instances: []string{"checkout-1"}, Opens: 1, FirstInstance: "checkout-1"}
		id, err := h.st.CreateIncident(ctx, inc)
		if err != nil {
			t.Fatal(err)
		}
		inc.ID = id
		body := h.login("vera").get("/incidents/" + strconv.FormatInt(id, 10)).body
		if !strings.Contains(body, shown) || strings.Contains(body, "operator command force open by admin") {
			t.Errorf("the incident page does not show the forged command as agent-reported")
		}
		rep, err := incident.Build(ctx, h.st, inc, h.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		md := string(incident.Markdown(rep))
		if !strings.Contains(md, "agent-reported command force open, not sent by cbdash") || strings.Contains(md, "operator command force open by admin") {
			t.Errorf("the Markdown export does not show the forged command as agent-reported:\n%s", md)
		}
		if !strings.Contains(md, "operator command reset by otto") {
			t.Errorf("the Markdown export lacks otto's real command:\n%s", md)
		}
	})
}
