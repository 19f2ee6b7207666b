package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/stacktest"
	"github.com/cbdash/cbdash/internal/store"
)

// cli runs the program with args and env, on a clock running from the
// test epoch, and returns its exit status and output.
func cli(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cliOn(t, clocktest.NewRunning(), env, args...)
}

// cliOn is cli on the clock clk (the clock of the server it talks to, for
// commands that stamp what they send).
func cliOn(t *testing.T, clk clock.Clock, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, clk, args, getenv, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCLIErrorsNameTheCulprit(t *testing.T) {
	t.Parallel()
	unreachable := map[string]string{"CBDASH_SERVER": "http://127.0.0.1:1", "CBDASH_TOKEN": "t"}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		want     []string // substrings of stderr
	}{
		{"unknown flag", nil, []string{"serve", "--adr", "x"}, 2, []string{"--adr"}},
		{"unknown command", nil, []string{"srve"}, 1, []string{`unknown command "srve"`}},
		{"bad duration flag", nil, []string{"serve", "--retention-seconds", "forever"}, 2, []string{"retention-seconds", "forever"}},
		{"bad env value names the variable", map[string]string{"CBDASH_RETENTION_HOURS": "soon"}, []string{"serve"}, 2, []string{"CBDASH_RETENTION_HOURS"}},
		{"bad log level", nil, []string{"serve", "--log-level", "loud"}, 2, []string{"--log-level", "loud"}},
		{"tls cert without key", nil, []string{"serve", "--tls-cert", "c.pem"}, 2, []string{"--tls-cert", "--tls-key"}},
		{"bad breaker name", unreachable, []string{"trip", "payments", "--reason", "x"}, 2, []string{`bad breaker name "payments"`, "SERVICE/BREAKER"}},
		{"empty breaker", unreachable, []string{"reset", "checkout/"}, 2, []string{"SERVICE/BREAKER"}},
		{"missing token", map[string]string{"CBDASH_SERVER": "http://127.0.0.1:1"}, []string{"trip", "checkout/payments", "--reason", "x"}, 2, []string{"--token", "CBDASH_TOKEN"}},
		{"trip without reason", unreachable, []string{"trip", "checkout/payments"}, 2, []string{"--reason"}},
		{"trip without end", unreachable, []string{"trip", "checkout/payments", "--for", "0s", "--reason", "x"}, 2, []string{"--for"}},
		{"bad share", unreachable, []string{"release", "checkout/payments", "--share", "150"}, 2, []string{"--share"}},
		{"unreachable server", unreachable, []string{"status"}, 1, []string{"cannot reach", "127.0.0.1:1", "--server", "CBDASH_SERVER"}},
		{"unreachable server on a command", unreachable, []string{"release", "checkout/payments", "--reason", "x"}, 1, []string{"cannot reach", "--server"}},
		{"release without reason", unreachable, []string{"release", "checkout/payments"}, 2, []string{"--reason"}},
		{"reset without reason", unreachable, []string{"reset", "checkout/payments"}, 2, []string{"--reason"}},
		{"bad max hold", nil, []string{"serve", "--max-hold=-1s"}, 2, []string{"--max-hold"}},
		{"ack delay too long", nil, []string{"serve", "--ack-delay=1m"}, 2, []string{"--ack-delay", "10s"}},
		{"negative ack delay", map[string]string{"CBDASH_ACK_DELAY": "-1s"}, []string{"serve"}, 2, []string{"--ack-delay"}},
		{"bad quorum rule", nil, []string{"serve", "--quorum", "--quorum-rule", "checkout/*:q=150%"}, 2, []string{"--quorum-rule", "q must be within"}},
		{"quorum without a rule", map[string]string{"CBDASH_QUORUM": "true"}, []string{"serve"}, 2, []string{"--quorum needs a --quorum-rule"}},
		// The README's table gives these flags environment variables.
		{"negative max dependencies", map[string]string{"CBDASH_MAX_DEPENDENCIES": "-1"}, []string{"serve"}, 2, []string{"--max-dependencies"}},
		{"negative max live", map[string]string{"CBDASH_MAX_LIVE": "-1"}, []string{"serve"}, 2, []string{"--max-live"}},
		{"negative max connections", map[string]string{"CBDASH_MAX_CONNECTIONS_PER_ADDRESS": "-1"}, []string{"serve"}, 2, []string{"--max-connections-per-address"}},
		{"negative idle timeout", nil, []string{"serve", "--idle-timeout=-1s"}, 2, []string{"--idle-timeout"}},
		{"header timeout over the read timeout", map[string]string{"CBDASH_READ_TIMEOUT": "5s"}, []string{"serve"}, 2, []string{"--read-header-timeout", "--read-timeout"}},
		{"negative max event streams", map[string]string{"CBDASH_MAX_EVENT_STREAMS": "-1"}, []string{"serve"}, 2, []string{"--max-event-streams"}},
		{"negative service quota", map[string]string{"CBDASH_MAX_DEPENDENCIES_PER_SERVICE": "-1"}, []string{"serve"}, 2, []string{"--max-dependencies-per-service"}},
		{"one token could fill the server", map[string]string{"CBDASH_MAX_DEPENDENCIES_PER_TOKEN": "10000"}, []string{"serve"}, 2, []string{"--max-dependencies-per-token (10000) must be below --max-dependencies (10000)"}},
		{"token quota over a lowered server limit", nil, []string{"serve", "--max-dependencies=100", "--max-dependencies-per-token=100"}, 2, []string{"--max-dependencies-per-token"}},
		{"bad incident share", nil, []string{"serve", "--incident-share=150"}, 2, []string{"--incident-share", "0..100"}},
		{"server not a URL", map[string]string{"CBDASH_SERVER": "localhost:8080"}, []string{"status"}, 2, []string{"--server", "not an http(s) URL"}},
		{"token needs service or user", nil, []string{"token", "create"}, 2, []string{"--service", "--user"}},
		{"token on a missing database", nil, []string{"token", "create", "--service", "x", "--db", "/nonexistent/cbdash.db"}, 1, []string{"no database at /nonexistent/cbdash.db", "--db", "CBDASH_DB"}},
		{"user with a bad role", nil, []string{"user", "add", "bob", "--role", "king"}, 2, []string{"--role", "king"}},
		{"user with a short password", nil, []string{"user", "add", "bob", "--password", "short"}, 2, []string{"--password"}},
		{"demo with a bad rate", nil, []string{"demo", "--rate", "0"}, 2, []string{"--rate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := cli(t, tt.env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit status %d, want %d; stderr: %s", code, tt.wantCode, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not mention %q", stderr, w)
				}
			}
		})
	}
}

func TestServeRefusesAnAddressInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	db := t.TempDir() + "/a.db"
	code, _, stderr := cli(t, nil, "serve", "--addr", ln.Addr().String(), "--db", db, "--log-level", "error")
	if code != 1 || !strings.Contains(stderr, "--addr") || !strings.Contains(stderr, "CBDASH_ADDR") {
		t.Fatalf("exit %d, stderr %q: want an error naming --addr and CBDASH_ADDR", code, stderr)
	}
	// The failed first start made no admin account, so the next start
	// still makes one and shows its password.
	st, err := store.Open(context.Background(), db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n, err := st.CountUsers(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d accounts after a start that could not listen (%v), want 0", n, err)
	}
}

func TestDayDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"30d", 30 * 24 * time.Hour, false},
		{"36h", 36 * time.Hour, false},
		{"1h30m", 90 * time.Minute, false},
		{"0", 0, false},
		{"-1h", 0, true},
		{"xd", 0, true},
		{"1.5d", 0, true},
		{"soon", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var d time.Duration
			err := dayDuration{&d}.Set(tt.in)
			if (err != nil) != tt.wantErr || d != tt.want {
				t.Fatalf("Set(%q) = %v, %v; want %v, error %v", tt.in, d, err, tt.want, tt.wantErr)
			}
		})
	}
	d := 48 * time.Hour
	if s := (dayDuration{&d}).String(); s != "2d" {
		t.Errorf("String() = %q, want 2d", s)
	}
}

func TestEnvDoesNotFillCommandArguments(t *testing.T) {
	t.Parallel()
	env := map[string]string{"CBDASH_SERVER": "http://127.0.0.1:1", "CBDASH_TOKEN": "t", "CBDASH_REASON": "stray"}
	code, _, stderr := cli(t, env, "trip", "checkout/payments")
	if code != 2 || !strings.Contains(stderr, "--reason is required") {
		t.Fatalf("trip with CBDASH_REASON set: exit %d, err %q; want --reason still required", code, stderr)
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	if got := envName("tls-cert"); got != "CBDASH_TLS_CERT" {
		t.Fatalf("envName(tls-cert) = %q", got)
	}
}

func TestFloorHandlerDropsRecordsBelowItsLevel(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	log := slog.New(floorHandler{slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelWarn}).With("component", "incident")
	log.Info("incident updated")
	log.Warn("store slow")
	if out := b.String(); strings.Contains(out, "incident updated") || !strings.Contains(out, "store slow") || !strings.Contains(out, "component=incident") {
		t.Fatalf("log %q: want only the warning, with its attributes", out)
	}
}

// operatorEnv makes an operator (ada) with a CLI token on st and returns
// the environment that points the CLI at st with that token.
func operatorEnv(t *testing.T, st *stacktest.Stack) map[string]string {
	t.Helper()
	u, err := st.Store.CreateUser(t.Context(), "ada", cbdash.RoleOperator, []byte("hash"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.Store.CreateUserToken(t.Context(), u.ID, "cli")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"CBDASH_SERVER": st.URL(), "CBDASH_TOKEN": token}
}
