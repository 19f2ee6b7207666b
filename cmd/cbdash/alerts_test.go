package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// TestAlertsCommandCreatesListsAndDeletesRules runs `cbdash alerts`
// against a real server stack with an alert service: a rule created with
// flags fires when a real breaker opens, and the listing shows it firing
// with since when; delete removes it.
func TestAlertsCommandCreatesListsAndDeletesRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.NewRunning()
	stack := stacktest.Start(t, stacktest.Options{Clock: clk,
		Collector: func(c *collector.Config) { c.PublishInterval = 50 * time.Millisecond },
		Alert:     func(c *alert.Config) { c.Interval, c.Delivery.AllowPrivate = 50*time.Millisecond, true }}) // the webhook is on loopback
	u, err := stack.Store.CreateUser(ctx, "otto", cbdash.RoleOperator, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := stack.Store.CreateUserToken(ctx, u.ID, "cli")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hook := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	hook.Listener.Close()
	hook.Listener = l
	hook.Start()
	defer hook.Close()
	env := map[string]string{"CBDASH_SERVER": stack.URL(), "CBDASH_TOKEN": token}

	if code, _, stderr := cli(t, env, "alerts", "create", "--service", "checkout", "--webhook", hook.URL); code != 2 || !strings.Contains(stderr, "--kind") {
		t.Fatalf("create without --kind: %d %s", code, stderr)
	}
	if code, _, stderr := cli(t, env, "alerts", "create", "--service", "checkout", "--kind", "open", "--webhook", hook.URL, "--hold", "soon"); code != 1 || !strings.Contains(stderr, "hold") {
		t.Fatalf("create with a bad --hold: %d %s", code, stderr)
	}
	code, out, stderr := cli(t, env, "alerts", "create", "--name", "payments down", "--service", "checkout", "--breaker", "payments",
		"--kind", "open", "--webhook", hook.URL, "--hold", "5m")
	if code != 0 || !strings.Contains(out, "created alert rule 1 (payments down, open on checkout/payments)") {
		t.Fatalf("create: %d %q %s", code, out, stderr)
	}

	code, out, stderr = cli(t, env, "alerts", "create", "--name", "stale fallbacks", "--service", "checkout", "--kind", "fallback_unexercised",
		"--for", "45d", "--webhook", hook.URL)
	if code != 0 || !strings.Contains(out, "created alert rule 2 (stale fallbacks, fallback_unexercised on checkout") {
		t.Fatalf("create fallback_unexercised: %d %q %s", code, out, stderr)
	}
	if r, err := stack.Store.AlertRule(ctx, 2); err != nil || r.For != 45*24*time.Hour {
		t.Fatalf("the fallback rule %+v (%v), want for 45 days", r, err)
	}
	if code, out, stderr := cli(t, env, "alerts", "delete", "2"); code != 0 {
		t.Fatalf("delete rule 2: %d %q %s", code, out, stderr)
	}

	b, err := breaker.New("payments", breaker.Config{Window: breaker.Window{Kind: breaker.CountWindow, Size: 10}, MinimumCalls: 5, OpenDuration: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{URL: stack.AgentURL(), Token: stack.AgentToken, Service: "checkout", Instance: "checkout-1",
		ReportInterval: 50 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Register(b); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	for range 10 {
		_ = b.Execute(ctx, func(context.Context) error { return errors.New("payments down") })
	}
	eventually.True(t, "the alert firing", func() bool { return len(stack.Alerts.Alerts()) == 1 })
	since := stack.Alerts.Alerts()[0].Since.UTC().Format(time.DateTime)

	code, out, stderr = cli(t, env, "alerts")
	if code != 0 {
		t.Fatalf("alerts: %d %s", code, stderr)
	}
	for _, want := range []string{"RULE", "payments down", "checkout/payments", "5m0s", since} {
		if !strings.Contains(out, want) {
			t.Errorf("`cbdash alerts` lacks %q:\n%s", want, out)
		}
	}
	// The firing table's first column is the rule's id, as `alerts ack` takes it.
	if !regexp.MustCompile(`Alerts firing now:\nRULE\s+NAME\s+SUBJECT.*\n1\s+payments down\s+checkout/payments\s+` + regexp.QuoteMeta(since)).MatchString(out) {
		t.Errorf("`cbdash alerts` firing table:\n%s", out)
	}
	silenceAndAck(t, env)
	if code, _, stderr := cli(t, env, "alerts", "delete", "x"); code != 2 || !strings.Contains(stderr, "bad rule id") {
		t.Errorf("delete x: %d %s", code, stderr)
	}
	if code, out, stderr := cli(t, env, "alerts", "delete", "1"); code != 0 || !strings.Contains(out, "deleted alert rule 1") {
		t.Fatalf("delete: %d %q %s", code, out, stderr)
	}
	if code, out, _ := cli(t, env, "alerts"); code != 0 || !strings.Contains(out, "no alert rule (cbdash alerts create)\n\nno alert firing\n") || strings.Contains(out, "NAME") {
		t.Errorf("after delete:\n%s", out)
	}
}

// silenceAndAck silences and acknowledges rule 1's alert on
// checkout/payments with the CLI, as otto: the listing says so, the
// silence is listed with its creator and, once expired, with who
// expired it.
func silenceAndAck(t *testing.T, env map[string]string) {
	t.Helper()
	if code, _, stderr := cli(t, env, "alerts", "silence", "--service", "checkout", "--for", "1h"); code != 2 || !strings.Contains(stderr, "--reason") {
		t.Errorf("silence without --reason: %d %s", code, stderr)
	}
	code, out, stderr := cli(t, env, "alerts", "silence", "--service", "checkout", "--breaker", "payments", "--for", "1h", "--reason", "payments drill")
	if code != 0 || !strings.Contains(out, "created silence 1 of service=checkout breaker=payments until") {
		t.Fatalf("silence: %d %q %s", code, out, stderr)
	}
	if code, out, stderr := cli(t, env, "alerts", "ack", "1", "checkout/payments"); code != 0 || !strings.Contains(out, "acknowledged rule 1 on checkout/payments") {
		t.Fatalf("ack: %d %q %s", code, out, stderr)
	}
	if code, _, stderr := cli(t, env, "alerts", "ack", "1", "checkout/nothing"); code != 1 ||
		!strings.Contains(stderr, "no alert of rule 1 is firing on checkout/nothing (HTTP 404)") || strings.Contains(stderr, "not found") {
		t.Errorf("ack of an alert not firing: %d %s", code, stderr)
	}
	if code, out, _ := cli(t, env, "alerts"); code != 0 || !strings.Contains(out, "silenced (silence 1), acked by otto") {
		t.Errorf("`cbdash alerts` after silence and ack:\n%s", out)
	}
	if code, out, _ := cli(t, env, "alerts", "silences"); code != 0 || !strings.Contains(out, "service=checkout breaker=payments") || !strings.Contains(out, "otto") {
		t.Errorf("`cbdash alerts silences`:\n%s", out)
	}
	if code, out, stderr := cli(t, env, "alerts", "unsilence", "1"); code != 0 || !strings.Contains(out, "expired silence 1") {
		t.Fatalf("unsilence: %d %q %s", code, out, stderr)
	}
	if code, out, _ := cli(t, env, "alerts", "silences", "--all"); code != 0 || !strings.Contains(out, "payments drill") || !strings.Contains(out, "by otto") {
		t.Errorf("`cbdash alerts silences --all` after unsilence:\n%s", out)
	}
}
