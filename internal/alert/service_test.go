package alert_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// feed stands in for the collector's live feed.
type feed struct{ ch chan cbdash.Event }

func (f *feed) Subscribe() ([]cbdash.Dependency, <-chan cbdash.Event, func()) {
	return []cbdash.Dependency{dep(payments, "a:closed", "b:closed")}, f.ch, func() {}
}

// errorHandler maps the cbdash sentinels like the web package's handler.
func errorHandler(err error, c echo.Context) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, cbdash.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, cbdash.ErrInvalid):
		status = http.StatusBadRequest
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		status = he.Code
	}
	_ = c.JSON(status, map[string]string{"error": err.Error()})
}

type apiClient struct {
	t    *testing.T
	base string
}

func (a apiClient) do(method, path string, body any, out any) int {
	a.t.Helper()
	var buf bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&buf).Encode(body); err != nil {
			a.t.Fatal(err)
		}
	}
	req, _ := http.NewRequest(method, a.base+path, &buf)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			a.t.Fatal(err)
		}
	}
	return resp.StatusCode
}

func TestServiceWithAPI(t *testing.T) {
	clk := breakertest.NewClock(t0)
	st := storetest.Open(t, clk)
	rcv := newReceiver(t)
	f := &feed{ch: make(chan cbdash.Event)}
	// Rules are evaluated every second of the clock, which the test moves.
	svc, err := alert.New(alert.Config{Source: f, Store: st, Clock: clk, Interval: time.Second, Delivery: alert.DeliveryConfig{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = errorHandler
	alert.NewAPI(svc).Mount(e, nil, nil)
	srv := httptest.NewUnstartedServer(e)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	api := apiClient{t, srv.URL}

	var rule alert.RuleJSON
	if code := api.do("POST", "/api/v1/alerts/rules", alert.RuleJSON{Name: "payments open", Service: "checkout", Breaker: "payments",
		Kind: cbdash.AlertOpen, Hold: "1m", WebhookURL: rcv.URL, Format: cbdash.FormatSlack}, &rule); code != http.StatusCreated {
		t.Fatalf("create rule: %d", code)
	}
	if rule.ID == 0 || rule.Hold != "1m0s" {
		t.Fatalf("created %+v", rule)
	}
	for _, bad := range []alert.RuleJSON{
		{Service: "checkout", Kind: "sometimes", WebhookURL: rcv.URL},
		{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: rcv.URL, Hold: "soon"},
		{Service: "checkout", Kind: cbdash.AlertOpen, WebhookURL: "not a url"},
	} {
		if code := api.do("POST", "/api/v1/alerts/rules", bad, nil); code != http.StatusBadRequest {
			t.Errorf("create %+v: %d, want 400", bad, code)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	// A breaker flapping every 4 s for two minutes: open 2 s, closed 2 s.
	for sec := 0; sec < 120; sec++ {
		clk.Set(at(sec))
		state := "a:closed"
		if sec%4 < 2 {
			state = "a:open"
		}
		if sec%4 == 0 {
			f.ch <- cbdash.Event{Kind: cbdash.EventTransition, At: at(sec), Transition: &cbdash.TransitionRecord{Service: "checkout", Instance: "a",
				Transition: protocol.Transition{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen, At: at(sec).UnixMilli()}}}
		}
		f.ch <- depEvent(sec, dep(payments, state, "b:closed"))
	}
	eventually.True(t, "the alert", func() bool { return len(rcv.received()) == 1 })
	clk.Set(at(120 + 61))
	eventually.True(t, "the resolve", func() bool { return len(rcv.received()) >= 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	bodies := rcv.received()
	if len(bodies) != 2 {
		t.Fatalf("receiver got %d messages, want one alert and one resolve:\n%s", len(bodies), bodies)
	}
	for i, prefix := range []string{"[FIRING] payments open: checkout/payments is open", "[RESOLVED] payments open: checkout/payments"} {
		var m struct{ Text string }
		if err := json.Unmarshal(bodies[i], &m); err != nil || !strings.HasPrefix(m.Text, prefix) {
			t.Errorf("message %d = %s, want text starting %q", i, bodies[i], prefix)
		}
	}
	var log []cbdash.AlertDelivery
	if code := api.do("GET", "/api/v1/alerts/deliveries?rule="+itoa(rule.ID), nil, &log); code != 200 {
		t.Fatalf("deliveries: %d", code)
	}
	if len(log) != 2 || log[0].Event != cbdash.AlertResolved || log[1].Event != cbdash.AlertFiring || !log[0].OK || log[1].Status != 200 {
		t.Errorf("delivery log = %+v", log)
	}

	rule.Disabled = true
	if code := api.do("PUT", "/api/v1/alerts/rules/"+itoa(rule.ID), rule, nil); code != 200 {
		t.Errorf("update: %d", code)
	}
	var rules []alert.RuleJSON
	api.do("GET", "/api/v1/alerts/rules", nil, &rules)
	if len(rules) != 1 || !rules[0].Disabled {
		t.Errorf("rules after update = %+v", rules)
	}
	if code := api.do("DELETE", "/api/v1/alerts/rules/"+itoa(rule.ID), nil, nil); code != http.StatusNoContent {
		t.Errorf("delete: %d", code)
	}
	if code := api.do("GET", "/api/v1/alerts/rules/"+itoa(rule.ID), nil, nil); code != http.StatusNotFound {
		t.Errorf("get after delete: %d, want 404", code)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
