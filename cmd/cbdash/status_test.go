package main

import (
	"bytes"
	"encoding/json"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ingest reports one instance over POST /api/v1/ingest: a hello with
// breaker "payments" of checkout, then one batch ending at now.
func ingest(t *testing.T, st *stacktest.Stack, instance string, w protocol.Window, ts ...protocol.Transition) {
	t.Helper()
	now := st.Clock.Now()
	w.Breaker, w.Start, w.Millis = "payments", now.Add(-time.Second).UnixMilli(), 1000
	req := protocol.IngestRequest{
		Hello: protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: instance,
			SDKVersion: "test", StartedAt: 1, Breakers: []protocol.BreakerConfig{{Name: "payments", WindowKind: "count", WindowSize: 100,
				FailureRateThreshold: 50, SlowCallRateThreshold: 80, MinimumCalls: 20, OpenDurationMillis: 10000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}},
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now.UnixMilli(), Transitions: ts, Windows: []protocol.Window{w}},
	}
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequest(http.MethodPost, st.URL()+"/api/v1/ingest", bytes.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+st.AgentToken)
	hr.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("ingest %s: %d", instance, res.StatusCode)
	}
}

func httpGet(t *testing.T, url string) []byte {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b.String())
	}
	return b.Bytes()
}

// TestStatusAPIAndTileAgree reads one moment (a virtual clock that does
// not move) three ways: `cbdash status`, /api/v1/breakers and the
// overview tile must say the same state and the same rates, and the
// per-instance rows of `cbdash status checkout/payments` are filled in.
func TestStatusAPIAndTileAgree(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk, Web: func(c *web.Config) { c.Anonymous = true }})
	trip := protocol.Transition{Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen, At: clk.Now().Add(-2 * time.Second).UnixMilli(),
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, SlowCallRate: 5, Threshold: 50}}
	ingest(t, st, "checkout-1", protocol.Window{State: protocol.StateOpen,
		Counts:   protocol.Counts{RejectedOpen: 40},
		Headroom: protocol.Headroom{MinimumCalls: 20, FailureRateThreshold: 50, SlowCallRateThreshold: 80}}, trip)
	ingest(t, st, "checkout-2", protocol.Window{State: protocol.StateClosed,
		Counts:   protocol.Counts{Admitted: 20, Successes: 18, Failures: 2, Errors: 2},
		Headroom: protocol.Headroom{Calls: 40, Failures: 5, MinimumCalls: 20, FailureRate: 12.5, FailureRateThreshold: 50, SlowCallRateThreshold: 80}})
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	eventually.True(t, "both instances live", func() bool {
		d, err := st.Collector.Dependency(k)
		return err == nil && d.Instances == 2 && d.State == protocol.StateOpen
	})

	var api []cbdash.Dependency
	if err := json.Unmarshal(httpGet(t, st.URL()+"/api/v1/breakers"), &api); err != nil || len(api) != 1 {
		t.Fatalf("api: %v %+v", err, api)
	}
	d := api[0]
	if d.Shown.Failure.Label != "failure rate, tripped at" || d.Shown.Failure.Text != "55% of 50%" || !d.OpenSince.Equal(time.UnixMilli(trip.At)) {
		t.Fatalf("api shows %+v, open since %v; want tripped at 55%% of 50%% since the trip", d.Shown, d.OpenSince)
	}
	if d.P99Millis != float64(d.P99)/float64(time.Millisecond) {
		t.Errorf("p99_ms %v beside p99 %v", d.P99Millis, d.P99)
	}
	page := html.UnescapeString(string(httpGet(t, st.URL()+"/")))
	tileRe := regexp.MustCompile(`(?s)<article id="t-[^"]*" class="tile"[^>]*data-state="([^"]+)".*?</article>`)
	m := tileRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no tile on the overview:\n%.2000s", page)
	}
	tile := regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[0], " ")
	tile = strings.Join(strings.Fields(tile), " ")

	code, out, stderr := cliOn(t, clk, map[string]string{"CBDASH_SERVER": st.URL()}, "status")
	if code != 0 {
		t.Fatalf("status: %d %s", code, stderr)
	}
	code, one, stderr := cliOn(t, clk, map[string]string{"CBDASH_SERVER": st.URL()}, "status", "checkout/payments")
	if code != 0 {
		t.Fatalf("status checkout/payments: %d %s", code, stderr)
	}
	t.Logf("tile: %s\nstatus:\n%s\nstatus checkout/payments:\n%s", tile, out, one)

	if m[1] != "open" || d.State != protocol.StateOpen || !strings.Contains(out, "open on 1 of 2") || !strings.Contains(tile, "open on 1 of 2") {
		t.Errorf("state: tile %q, api %q; status and tile must both say open on 1 of 2", m[1], d.State)
	}
	for _, want := range []string{
		d.Shown.Failure.Label + " " + d.Shown.Failure.Text, // the tile: "failure rate, tripped at 55% of 50%"
		d.Shown.Slow.Label + " " + d.Shown.Slow.Text,
		"rejected (1 min) " + wording.PerSecond(d.RejectedRate), "admitted (1 min) " + wording.PerSecond(d.AdmittedRate),
	} {
		if !strings.Contains(tile, want) {
			t.Errorf("the tile lacks the API's %q", want)
		}
	}
	for _, want := range []string{"FAILURE RATE", "SLOW-CALL RATE", "ADMITTED/S (1 MIN)", "REJECTED/S (1 MIN)", "P99 (1 MIN)", "OPEN SINCE",
		"tripped at 55% of 50%", "at trip 5% of 80%", wording.PerSecond(d.AdmittedRate), wording.PerSecond(d.RejectedRate),
		time.UnixMilli(trip.At).UTC().Format(time.TimeOnly) + " UTC (2s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	// Per instance: every column filled in, with the dashboard's words.
	rows := map[string]string{}
	for _, l := range strings.Split(one, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, "  ") {
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	for inst, want := range map[string][]string{
		"checkout-1": {"open", "UTC (2s)", "0/s", "40.0/s", "tripped at 55% of 50%", "at trip 5% of 80%"},
		"checkout-2": {"closed", "-", "20.0/s", "0/s", "12.5% of 50%", "0% of 80%"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[inst], w) {
				t.Errorf("status row of %s = %q, lacks %q", inst, rows[inst], w)
			}
		}
	}
}
