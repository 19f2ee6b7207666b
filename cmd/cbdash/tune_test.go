package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ingestClimb reports, for instance, the 180 seconds before the stack's
// now of checkout/payments (the hello of ingest's): 20 calls a second, 2%
// failing for a minute, then a failure rate climbing 2 points a second.
func ingestClimb(t *testing.T, st *stacktest.Stack, instance string) {
	t.Helper()
	now := st.Clock.Now().Truncate(time.Second)
	var ws []protocol.Window
	for i := range 180 {
		fail := int64(0)
		if i >= 60 {
			fail = min(20, int64(i-60)*2/5)
		}
		ws = append(ws, protocol.Window{Breaker: "payments", State: protocol.StateClosed, Start: now.Add(time.Duration(i-180) * time.Second).UnixMilli(), Millis: 1000,
			Counts: protocol.Counts{Admitted: 20, Successes: 20 - fail, Failures: fail, Errors: fail}})
	}
	req := protocol.IngestRequest{
		Hello: protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "checkout", Instance: instance,
			SDKVersion: "test", StartedAt: 1, Breakers: []protocol.BreakerConfig{{Name: "payments", WindowKind: "count", WindowSize: 100,
				FailureRateThreshold: 50, SlowCallRateThreshold: 100, MinimumCalls: 20, OpenDurationMillis: 10000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1}}},
		Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now.UnixMilli(), Windows: ws},
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

// climbStack is a stack holding ingestClimb's history from two instances,
// and the environment of a viewer's CLI against it.
func climbStack(t *testing.T) (*stacktest.Stack, map[string]string) {
	st := stacktest.Start(t, stacktest.Options{Clock: clocktest.Virtual()})
	ingestClimb(t, st, "checkout-1")
	ingestClimb(t, st, "checkout-2")
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	eventually.True(t, "the history stored", func() bool {
		pts, err := st.Store.History(t.Context(), cbdash.HistoryQuery{DependencyKey: k, From: st.Clock.Now().Add(-time.Hour), To: st.Clock.Now()})
		return err == nil && len(pts) == 180 && pts[179].Reports == 2
	})
	u, err := st.Store.CreateUser(t.Context(), "vera", cbdash.RoleViewer, []byte("hash"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.Store.CreateUserToken(t.Context(), u.ID, "cli")
	if err != nil {
		t.Fatal(err)
	}
	return st, map[string]string{"CBDASH_SERVER": st.URL(), "CBDASH_TOKEN": token}
}

func TestTuneCommandPrintsTheTable(t *testing.T) {
	t.Parallel()
	st, env := climbStack(t)
	from, to := st.Clock.Now().Add(-200*time.Second).Format(time.RFC3339), st.Clock.Now().Format(time.RFC3339)
	code, out, stderr := cli(t, env, "tune", "checkout/payments", "--from", from, "--to", to, "--candidate", "failure-rate=20,minimum-calls=10")
	if code != 0 {
		t.Fatalf("tune: %d %s", code, stderr)
	}
	t.Logf("cbdash tune:\n%s", out)
	lines := strings.Split(out, "\n")
	var live, cand string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "live "):
			live = l
		case strings.HasPrefix(l, "failure-rate=20"):
			cand = l
		}
	}
	if !strings.Contains(out, "as one of 2.0 instances") || !strings.Contains(live, "50% of 100 calls, min 20") ||
		!strings.Contains(cand, "20% of 100 calls, min 10") || !strings.Contains(out, "note: replayed from per-second totals") {
		t.Errorf("output:\n%s", out)
	}
	if code, _, stderr := cli(t, env, "tune", "checkout/payments", "--from", from, "--to", to, "--candidate", "threshold=20"); code != 1 || !strings.Contains(stderr, "threshold=20") {
		t.Errorf("a bad candidate: %d %s", code, stderr)
	}
	if code, out, stderr := cli(t, env, "tune", "checkout/payments", "--from", from, "--to", to, "--grid", "failure-rate=20|50|90,open=5s|30s"); code != 0 || strings.Count(out, "\n* ") == 0 {
		t.Errorf("a sweep: %d %s %s", code, out, stderr)
	}
}

func TestReviewCommandAnswersEveryQuestion(t *testing.T) {
	t.Parallel()
	_, env := climbStack(t)
	code, out, stderr := cli(t, env, "review", "checkout/payments")
	if code != 0 {
		t.Fatalf("review: %d %s", code, stderr)
	}
	t.Logf("cbdash review:\n%s", out)
	// The climbing stack has no timeout, no ignored outcome and no
	// fallback: those say no, and what to change.
	for _, want := range []string{"checkout/payments (50% of 100 calls, min 20, open 10s)", "no      Does it trip on slow calls?",
		"yes     Does it judge a rate over a window", "yes     Is it visible", "change: set a call timeout"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if code, out, _ := cli(t, env, "review"); code != 0 || strings.Count(out, "Does it trip on slow calls?") != 1 {
		t.Errorf("review of all: %d\n%s", code, out)
	}
}
