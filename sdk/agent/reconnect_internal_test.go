package agent

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

func TestReadyzURL(t *testing.T) {
	for in, want := range map[string]string{
		"ws://127.0.0.1:8080/api/v1/agent":          "http://127.0.0.1:8080/readyz",
		"wss://c.example.com/api/v1/agent":          "https://c.example.com/readyz",
		"wss://lb.example.com/cbdash/api/v1/agent":  "https://lb.example.com/cbdash/readyz",
		"ws://[::1]:9000/api/v1/agent?x=1#frag":     "http://[::1]:9000/readyz",
		"ws://c.example.com/elsewhere":              "http://c.example.com/readyz",
		"ws://c.example.com":                        "http://c.example.com/readyz",
		"wss://c.example.com/p%2Fq/api/v1/agent/x/": "https://c.example.com/p%2Fq/readyz",
	} {
		if got, err := readyzURL(in); err != nil || got != want {
			t.Errorf("readyzURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestFailureLogWarnsOncePerPeriod: the first failure of a series is
// logged, the next ones once per failureLogEvery with how many they are,
// and a reset starts a new series.
func TestFailureLogWarnsOncePerPeriod(t *testing.T) {
	var l failureLog
	t0 := breakertest.Epoch() // the package's test clock's start: any instant does
	type want struct {
		at       time.Duration
		log      bool
		failures int
	}
	for _, w := range []want{
		{0, true, 1},
		{time.Second, false, 0},
		{29 * time.Second, false, 0},
		{30 * time.Second, true, 3},
		{31 * time.Second, false, 0},
		{61 * time.Second, true, 2},
		{10 * time.Second, true, 1}, // the clock stepped back: logged
	} {
		if log, n := l.note(t0.Add(w.at)); log != w.log || n != w.failures {
			t.Fatalf("failure at %v: log %v with %d failures, want %v with %d", w.at, log, n, w.log, w.failures)
		}
	}
	l.reset()
	if log, n := l.note(t0.Add(11 * time.Second)); !log || n != 1 {
		t.Fatalf("first failure after a reset: log %v with %d failures", log, n)
	}
}

func TestRetryAfterWaitBounds(t *testing.T) {
	for _, c := range []struct{ after, longest, lo, hi time.Duration }{
		{time.Second, 30 * time.Second, time.Second, 1500 * time.Millisecond},
		{10 * time.Millisecond, 30 * time.Second, 100 * time.Millisecond, 150 * time.Millisecond}, // at least 100 ms
		{time.Minute, 30 * time.Second, 30 * time.Second, 30 * time.Second},                       // at most ReconnectMax
		{time.Second, 1200 * time.Millisecond, time.Second, 1200 * time.Millisecond},
		{time.Second, 50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}, // ReconnectMax wins over 100 ms
	} {
		for range 200 {
			if w := retryAfterWait(c.after, c.longest); w < c.lo || w > c.hi {
				t.Fatalf("retryAfterWait(%v, %v) = %v, want within [%v, %v]", c.after, c.longest, w, c.lo, c.hi)
			}
		}
	}
}

// TestNotListeningIsARefusedDial: a websocket dial to a closed loopback
// port is recognised as nothing listening; a dial that times out, and an
// HTTP error from a listening server, are not.
func TestNotListeningIsARefusedDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, _, err = websocket.Dial(context.Background(), "ws://"+addr+"/api/v1/agent", nil)
	if err == nil || !notListening(err) {
		t.Fatalf("dial to a closed port: %v, not recognised as nothing listening", err)
	}

	srv := &http.Server{Handler: http.NotFoundHandler()}
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	_, _, err = websocket.Dial(context.Background(), "ws://"+ln.Addr().String()+"/api/v1/agent", nil)
	if err == nil || notListening(err) {
		t.Fatalf("dial answered 404: %v, taken for nothing listening", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, _, err = websocket.Dial(ctx, "ws://"+ln.Addr().String()+"/api/v1/agent", nil)
	if err == nil || notListening(err) {
		t.Fatalf("dial that timed out: %v, taken for nothing listening", err)
	}
}
