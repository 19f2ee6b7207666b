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
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/cbdash/cbdash"
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
// hello and reads the welcome.
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
	if typ, raw := a.next(ctx); typ != protocol.TypeWelcome {
		h.t.Fatalf("hello of %s/%s: %s", hi.Service, hi.Instance, raw)
	}
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
	h := newHarness(t, web.Config{}, quiet(dep("billing", "payments", 1, 0)))
	ctx := t.Context()
	attacker, err := h.st.CreateAgentToken(ctx, "attacker")
	if err != nil {
		t.Fatal(err)
	}
	issue := func() cbdash.Command {
		t.Helper()
		cmd, err := h.col.Issue(ctx, cbdash.CommandRequest{Service: "billing", Breaker: "payments",
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
		if want := `cbdash_collector_agent_refused_total{reason="foreign_command_result"} 3`; !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	})
}
