package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// requestLog records the requests a test server answered and the
// deprecated answers among them.
type requestLog struct {
	mu         sync.Mutex
	requests   []string // "METHOD path?query"
	deprecated []string
}

func (l *requestLog) add(r *http.Request, deprecation string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, r.Method+" "+r.URL.RequestURI())
	if deprecation != "" {
		l.deprecated = append(l.deprecated, r.Method+" "+r.URL.RequestURI())
	}
}

func (l *requestLog) take() (requests, deprecated []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	requests, deprecated = l.requests, l.deprecated
	l.requests, l.deprecated = nil, nil
	return requests, deprecated
}

// TestCLIUsesAPI110AndFallsBackOnAnOlderServer: against this server
// `cbdash status`, `trip --dry-run` and `holds report` read the paths of
// API 1.1.0 and never a deprecated form; against a server of API 1.0.0
// (no /api/v1/dependencies, /api/v1/holds/plan or report.md: 404, or 405
// where a route of another method matches) they read that server's forms
// and print the same.
func TestCLIUsesAPI110AndFallsBackOnAnOlderServer(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	st := stacktest.Start(t, stacktest.Options{Clock: clk})
	ingest(t, st, "checkout-1", protocol.Window{State: protocol.StateClosed, Counts: protocol.Counts{Admitted: 20, Successes: 20},
		Headroom: protocol.Headroom{Calls: 20, MinimumCalls: 20, FailureRateThreshold: 50, SlowCallRateThreshold: 80}})
	eventually.True(t, "checkout/payments live", func() bool {
		_, err := st.Collector.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
		return err == nil
	})
	ctx := t.Context()
	u, err := st.Store.CreateUser(ctx, "ada", cbdash.RoleOperator, []byte("hash"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.Store.CreateUserToken(ctx, u.ID, "cli")
	if err != nil {
		t.Fatal(err)
	}
	hold, err := st.Collector.CreateHold(ctx, cbdash.Actor{Name: "ada", Role: cbdash.RoleOperator, Kind: cbdash.ActorUser},
		cbdash.HoldRequest{Selector: cbdash.Selector{Service: "checkout", Breaker: "payments"}, Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "drill"})
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(st.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)

	var newLog, oldLog requestLog
	current := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		newLog.add(r, rec.Header().Get("Deprecation"))
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer current.Close()
	// A server of API 1.0.0: this one with the paths 1.1.0 added
	// answered as echo answers a route it does not have.
	older := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		oldLog.add(r, "")
		switch {
		case r.URL.Path == "/api/v1/dependencies" || strings.HasSuffix(r.URL.Path, "/report.md"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"Not Found"}`))
			return
		case r.URL.Path == "/api/v1/holds/plan":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = w.Write([]byte(`{"error":"Method Not Allowed"}`))
			return
		case r.URL.Path == "/api/v1/breakers": // API 1.0.0 answered summaries
			r.URL.Path = "/api/v1/dependencies"
		}
		proxy.ServeHTTP(w, r)
	}))
	defer older.Close()

	for _, c := range []struct {
		args       []string
		out        string
		current    []string // the requests this server gets
		fellBackTo string   // the last request the older server gets
	}{
		{[]string{"status"}, "checkout/payments", []string{"GET /api/v1/dependencies?service="}, "GET /api/v1/breakers?service="},
		{[]string{"trip", "checkout/payments", "--for", "1m", "--reason", "x", "--dry-run"}, "would cover 1 service(s) [checkout], 1 of 1 instance(s)",
			[]string{"POST /api/v1/holds/plan"}, "POST /api/v1/holds?dry_run=1"},
		{[]string{"holds", "report", hold.ID}, "# Drill report: force open checkout/payments",
			[]string{"GET /api/v1/holds/" + hold.ID + "/report.md"}, "GET /api/v1/holds/" + hold.ID + "/report?format=md"},
	} {
		for _, srv := range []struct {
			name string
			url  string
			log  *requestLog
		}{{"this server", current.URL, &newLog}, {"a server of API 1.0.0", older.URL, &oldLog}} {
			code, out, stderr := cliOn(t, clk, map[string]string{"CBDASH_SERVER": srv.url, "CBDASH_TOKEN": token}, c.args...)
			if code != 0 || !strings.Contains(out, c.out) {
				t.Errorf("cbdash %s on %s: exit %d, out %q, err %q; want %q", strings.Join(c.args, " "), srv.name, code, out, stderr, c.out)
			}
			if c.args[0] == "holds" && !strings.HasSuffix(out, "\n") {
				t.Errorf("cbdash %s on %s ends without a newline: %q", strings.Join(c.args, " "), srv.name, out[max(0, len(out)-40):])
			}
			reqs, deprecated := srv.log.take()
			switch {
			case len(deprecated) > 0:
				t.Errorf("cbdash %s on %s used deprecated forms: %q", strings.Join(c.args, " "), srv.name, deprecated)
			case srv.log == &newLog && !slices.Equal(reqs, c.current):
				t.Errorf("cbdash %s on %s asked %q, want %q", strings.Join(c.args, " "), srv.name, reqs, c.current)
			case srv.log == &oldLog && (len(reqs) != 2 || reqs[1] != c.fellBackTo):
				t.Errorf("cbdash %s on %s asked %q, want the new form, then %q", strings.Join(c.args, " "), srv.name, reqs, c.fellBackTo)
			}
		}
	}
	if code, out, stderr := cliOn(t, clk, map[string]string{"CBDASH_SERVER": current.URL, "CBDASH_TOKEN": token}, "holds", "report", hold.ID, "--json"); code != 0 || !strings.HasSuffix(out, "}\n") {
		t.Errorf("cbdash holds report --json: exit %d (%q), want JSON ending with a newline: %q", code, stderr, out[max(0, len(out)-40):])
	}
	newLog.take()
	// A hold this server does not have is a 404 of its own, not a
	// missing route: asked once, not again in the older form.
	code, _, stderr := cliOn(t, clk, map[string]string{"CBDASH_SERVER": current.URL, "CBDASH_TOKEN": token}, "holds", "report", "no-such-hold")
	if reqs, _ := newLog.take(); code == 0 || len(reqs) != 1 {
		t.Errorf("cbdash holds report of a missing hold: exit %d (%q), asked %q; want a failure after one request", code, stderr, reqs)
	}
}
