package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/pgtest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
)

// serveProc is one `cbdash serve` process.
type serveProc struct {
	url  string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

func (p *serveProc) agentURL() string {
	return "ws" + strings.TrimPrefix(p.url, "http") + "/api/v1/agent"
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// buildCbdash builds the cbdash binary into dir.
func buildCbdash(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "cbdash")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/cbdash/cbdash/cmd/cbdash").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cbdash: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startServe(t *testing.T, bin, dsn, name string) *serveProc {
	t.Helper()
	return startServeAt(t, bin, dsn, name, freeAddr(t))
}

// startServeAt starts `cbdash serve` on addr and waits for it to be ready.
func startServeAt(t *testing.T, bin, dsn, name, addr string) *serveProc {
	t.Helper()
	p := &serveProc{url: "http://" + addr, logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve", "--db", dsn, "--addr", addr, "--allow-private-webhooks",
		"--admin-password", "e2e-admin-password", "--log-level", "info")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second): // real time: a process that does not stop
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("logs of collector %s:\n%s", name, p.logs.String())
		}
	})
	eventually.Within(t, 30*time.Second, "collector "+name+" ready", func() bool {
		resp, err := http.Get(p.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

func cbdashCLI(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("cbdash %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatalf("cbdash %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// api calls a collector's JSON API with the user token and decodes the
// answer into out (when not nil); it returns the status.
func api(t *testing.T, token, method, url string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
	}
	return resp.StatusCode
}

type member struct {
	name string
	ag   *agent.Agent
	br   *breaker.Breaker
}

// TestTwoCollectorsOverOnePostgreSQLActAsOne is issue 17's end-to-end
// check: two `cbdash serve` processes over one PostgreSQL database,
// agents given both URLs split across them. Collector A's API shows the
// instances connected to B within a second; a hold created on A is
// applied by the instances on B, and its release too; one breaker trips:
// one incident and one alert, whichever collector leads; A is killed
// with SIGKILL while the breakers are called: its agents move to B, and
// the store holds exactly what the breakers counted (nothing acked lost,
// nothing resent stored twice).
func TestTwoCollectorsOverOnePostgreSQLActAsOne(t *testing.T) {
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI", pgtest.EnvDSN)
		}
		t.Skipf("needs PostgreSQL: set %s (see README, Tests on PostgreSQL)", pgtest.EnvDSN)
	}
	if testing.Short() {
		t.Skip("builds cbdash and runs two processes")
	}
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	bin := buildCbdash(t, dir)
	cbdashCLI(t, bin, "user", "add", "ada", "--role", "admin", "--password", "ada-password-e2e", "--db", dsn)
	userTok := cbdashCLI(t, bin, "token", "create", "--user", "ada", "--name", "e2e", "--db", dsn)
	agentTok := cbdashCLI(t, bin, "token", "create", "--service", "checkout", "--db", dsn)

	a := startServe(t, bin, dsn, "A")
	b := startServe(t, bin, dsn, "B")

	var firing, resolved atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case bytes.Contains(body, []byte(`"firing"`)):
			firing.Add(1)
		case bytes.Contains(body, []byte(`"resolved"`)):
			resolved.Add(1)
		}
	}))
	defer hook.Close()
	rule := cbdash.AlertRule{Name: "payments open", Service: "checkout", Breaker: "payments", Kind: cbdash.AlertOpen, WebhookURL: hook.URL}
	if code := api(t, userTok, http.MethodPost, a.url+"/api/v1/alerts/rules", rule, nil); code != http.StatusCreated {
		t.Fatalf("create the alert rule on A: status %d", code)
	}

	urls := []string{a.agentURL(), b.agentURL()}
	newMember := func(name string, cfg breaker.Config) member {
		br, err := breaker.New("payments", cfg)
		if err != nil {
			t.Fatal(err)
		}
		ag, err := agent.New(agent.Config{
			URLs: urls, Token: agentTok, Service: "checkout", Instance: name,
			ReportInterval: 100 * time.Millisecond, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ag.Register(br); err != nil {
			t.Fatal(err)
		}
		if err := ag.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ag.Close(context.Background()) })
		return member{name, ag, br}
	}
	var fleet []member
	for i := range 8 {
		fleet = append(fleet, newMember(fmt.Sprintf("c%d", i), breaker.Config{MinimumCalls: 1 << 30}))
	}
	on := func(url string) []member {
		var out []member
		for _, m := range fleet {
			if m.ag.Stats().Collector == url {
				out = append(out, m)
			}
		}
		return out
	}
	eventually.True(t, "every agent acknowledged", func() bool {
		for _, m := range fleet {
			if m.ag.Stats().Acked == 0 {
				return false
			}
		}
		return true
	})
	connected := time.Now() // real time: two processes on the system clock
	onA, onB := on(urls[0]), on(urls[1])
	if len(onA) == 0 || len(onB) == 0 || len(onA)+len(onB) != len(fleet) {
		t.Fatalf("the fleet did not split: %d on A, %d on B of %d", len(onA), len(onB), len(fleet))
	}
	t.Logf("%d agents on A, %d on B", len(onA), len(onB))

	// A dashboard on A shows B's instances, live, within a second.
	shows := func(p *serveProc, ms []member) func() bool {
		return func() bool {
			var d cbdash.Dependency
			if api(t, userTok, http.MethodGet, p.url+"/api/v1/breakers/checkout/payments", nil, &d) != http.StatusOK {
				return false
			}
			live := map[string]bool{}
			for _, ib := range d.PerInstance {
				live[ib.Instance] = !ib.Stale
			}
			for _, m := range ms {
				if !live[m.name] {
					return false
				}
			}
			return true
		}
	}
	eventually.Within(t, time.Second, "A's API showing every instance connected to B", shows(a, onB))
	t.Logf("A showed B's instances %v after they were acknowledged", time.Since(connected))
	eventually.Within(t, time.Second, "B's API showing every instance connected to A", shows(b, onA))

	// A hold created on A reaches the instances on B; so does its release.
	var h cbdash.HoldRecord
	hr := map[string]any{"selector": map[string]any{"service": "checkout", "breaker": "payments"},
		"action": "force_open", "ttl": "5m", "reason": "e2e: hold from A"}
	if code := api(t, userTok, http.MethodPost, a.url+"/api/v1/holds", hr, &h); code != http.StatusCreated {
		t.Fatalf("create the hold on A: status %d", code)
	}
	allIn := func(ms []member, st breaker.State) func() bool {
		return func() bool {
			for _, m := range ms {
				if m.br.State() != st {
					return false
				}
			}
			return true
		}
	}
	eventually.True(t, "the instances on B forced open by the hold from A", allIn(onB, breaker.ForcedOpen))
	eventually.True(t, "the instances on A forced open", allIn(onA, breaker.ForcedOpen))
	if code := api(t, userTok, http.MethodPost, a.url+"/api/v1/holds/"+h.ID+"/release", map[string]string{"reason": "e2e: done"}, nil); code != http.StatusOK {
		t.Fatalf("release the hold on A: status %d", code)
	}
	eventually.True(t, "the instances on B closed again after the release on A", allIn(onB, breaker.Closed))
	eventually.True(t, "the instances on A closed again", allIn(fleet, breaker.Closed))

	// A command issued on A for an instance on B is routed there, and its
	// result recorded once.
	var cmd cbdash.Command
	creq := map[string]any{"service": "checkout", "breaker": "payments", "action": "reset", "instance": onB[0].name, "reason": "e2e: reset from A"}
	if code := api(t, userTok, http.MethodPost, a.url+"/api/v1/commands", creq, &cmd); code/100 != 2 {
		t.Fatalf("issue a reset on A for %s on B: status %d", onB[0].name, code)
	}
	eventually.True(t, "the reset issued on A applied by the instance on B", func() bool {
		var got cbdash.Command
		if api(t, userTok, http.MethodGet, a.url+"/api/v1/commands/"+cmd.ID, nil, &got) != http.StatusOK {
			return false
		}
		return len(got.Targets) == 1 && got.Targets[0].Status == cbdash.TargetApplied
	})

	// One trip: an instance whose breaker opens once and stays open.
	tripper := newMember("t0", breaker.Config{MinimumCalls: 10, OpenDuration: time.Hour})
	fleet = append(fleet, tripper)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		boom := errors.New("boom")
		pace := time.NewTicker(time.Millisecond) // a round of calls a millisecond at most: the collectors need the cores
		defer pace.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-pace.C:
			}
			for _, m := range fleet {
				_ = m.br.Execute(context.Background(), func(context.Context) error {
					if m.name == tripper.name || i%4 == 0 {
						return boom
					}
					return nil
				})
			}
		}
	}()
	eventually.True(t, "the tripping breaker open", func() bool { return tripper.br.State() == breaker.Open })
	eventually.True(t, "one incident", func() bool { return len(incidents(t, dsn)) == 1 })
	eventually.True(t, "one alert delivered", func() bool { return firing.Load() == 1 })
	acked := func() []uint64 {
		out := make([]uint64, len(fleet))
		for i, m := range fleet {
			out[i] = m.ag.Stats().Acked
		}
		return out
	}
	before := acked()
	eventually.True(t, "batches acknowledged while streaming", func() bool {
		now := acked()
		for i := range now {
			if now[i] < before[i]+3 {
				return false
			}
		}
		return true
	})

	killed := time.Now()
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, no deferred code
		t.Fatal(err)
	}
	<-a.done
	eventually.True(t, "every agent on B", func() bool { return len(on(urls[1])) == len(fleet) })
	t.Logf("every agent on B %v after A was killed", time.Since(killed))
	eventually.True(t, "B leading incident detection and alert delivery", func() bool {
		return len(leading.FindAllString(b.logs.String(), -1)) >= 2
	})
	before = acked()
	eventually.True(t, "batches acknowledged by B after the kill", func() bool {
		now := acked()
		for i := range now {
			if now[i] < before[i]+10 {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	for _, m := range fleet {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := m.ag.Close(ctx)
		cancel()
		if err != nil {
			t.Fatalf("close agent %s: %v", m.name, err)
		}
	}

	var want breaker.Totals
	for _, m := range fleet {
		tot := m.br.Snapshot().Totals
		want.Admitted += tot.Admitted
		want.Failures += tot.Failures
	}
	admitted, failures := storedCounts(t, dsn)
	if uint64(admitted) != want.Admitted || uint64(failures) != want.Failures {
		t.Fatalf("stored admitted %d, failures %d; the breakers counted %d and %d", admitted, failures, want.Admitted, want.Failures)
	}
	t.Logf("stored exactly what the breakers counted: %d calls, %d failures", admitted, failures)
	if n := len(incidents(t, dsn)); n != 1 {
		t.Errorf("%d incidents for one trip, want 1", n)
	}
	if n := firing.Load(); n != 1 {
		t.Errorf("%d alerts delivered for one trip, want 1", n)
	}
}

// leading matches B's log lines saying it leads incident detection or
// alert delivery.
var leading = regexp.MustCompile(`msg=leading .*singleton=(incidents|alerts)`)

func openStore(t *testing.T, dsn string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func incidents(t *testing.T, dsn string) []cbdash.Incident {
	t.Helper()
	st := openStore(t, dsn)
	defer st.Close()
	is, err := st.Incidents(context.Background(), cbdash.IncidentQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return is
}

func storedCounts(t *testing.T, dsn string) (admitted, failures int64) {
	t.Helper()
	return storedCountsOf(t, dsn, cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
}

// storedCountsOf sums the calls and failures the store holds for dependency k.
func storedCountsOf(t *testing.T, dsn string, k cbdash.DependencyKey) (admitted, failures int64) {
	t.Helper()
	st := openStore(t, dsn)
	defer st.Close()
	now := time.Now()
	pts, err := st.History(context.Background(), cbdash.HistoryQuery{
		DependencyKey: k,
		From:          now.Add(-time.Hour), To: now.Add(time.Hour), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pts {
		admitted += p.Counts.Admitted
		failures += p.Counts.Failures
	}
	return admitted, failures
}
