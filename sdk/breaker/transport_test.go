package breaker_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// statusServer answers each request with the status in its "s" query
// parameter and a body of "hello".
func statusServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("s"))
		if code == 0 {
			code = 200
		}
		w.WriteHeader(code)
		io.WriteString(w, "hello")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		t.Cleanup(func() { resp.Body.Close() })
	}
	return resp, err
}

func TestTransport(t *testing.T) {
	t.Run("5xx opens the breaker of its host; 4xx is a success", func(t *testing.T) {
		srv := statusServer(t)
		var made []*breaker.Breaker
		tr := breaker.NewTransport(srv.Client().Transport, breaker.TransportConfig{
			Config: small,
			OnNew:  func(b *breaker.Breaker) { made = append(made, b) },
		})
		c := &http.Client{Transport: tr}
		for _, s := range []string{"404", "200", "503", "500"} {
			resp, err := get(t, c, srv.URL+"/?s="+s)
			if err != nil || strconv.Itoa(resp.StatusCode) != s {
				t.Fatalf("GET s=%s: %v %v", s, resp, err)
			}
		}
		if len(made) != 1 || made[0].Name() != srv.Listener.Addr().String() {
			t.Fatalf("breakers made: %v", made)
		}
		b := made[0]
		tot := b.Snapshot().Totals
		if b.State() != breaker.Open || tot.Successes != 2 || tot.Failures != 2 {
			t.Fatalf("state %v totals %+v", b.State(), tot)
		}
		_, err := get(t, c, srv.URL)
		var rej *breaker.RejectedError
		if !errors.As(err, &rej) || !errors.Is(err, breaker.ErrOpen) || rej.Breaker != b.Name() {
			t.Errorf("GET while open = %v, want a RejectedError for ErrOpen", err)
		}
		if got := tr.Breakers(); len(got) != 1 || got[0] != b {
			t.Errorf("Breakers() = %v", got)
		}
	})
	t.Run("a connection error is a failure", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		tr := breaker.NewTransport(nil, breaker.TransportConfig{
			Config:     small,
			BreakerFor: func(*http.Request) string { return "payments" },
		})
		c := &http.Client{Transport: tr}
		if _, err := get(t, c, "http://"+addr+"/"); err == nil {
			t.Fatal("no error from a closed port")
		}
		b, _ := tr.Breaker("payments")
		if tot := b.Snapshot().Totals; tot.Errors != 1 {
			t.Errorf("totals %+v, want one error", tot)
		}
	})
	t.Run("the body is left for the caller", func(t *testing.T) {
		srv := statusServer(t)
		tr := breaker.NewTransport(srv.Client().Transport, breaker.TransportConfig{Config: small})
		resp, err := get(t, &http.Client{Transport: tr}, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != "hello" {
			t.Errorf("body %q, %v", body, err)
		}
	})
	t.Run("a canceled request is not a failure", func(t *testing.T) {
		arrived := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-r.Context().Done()
		}))
		defer srv.Close()
		tr := breaker.NewTransport(srv.Client().Transport, breaker.TransportConfig{Config: small})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		go func() {
			<-arrived
			cancel()
		}()
		if _, err := (&http.Client{Transport: tr}).Do(req); err == nil {
			t.Fatal("no error")
		}
		b := tr.Breakers()[0]
		if tot := b.Snapshot().Totals; tot.Ignored != 1 || tot.Failures != 0 {
			t.Errorf("totals %+v, want one ignored", tot)
		}
	})
	t.Run("the call timeout cancels the request and counts a timeout", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		arrived := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-r.Context().Done()
		}))
		defer srv.Close()
		cfg := small
		cfg.Clock = clk
		cfg.CallTimeout = time.Second
		tr := breaker.NewTransport(srv.Client().Transport, breaker.TransportConfig{Config: cfg})
		go func() {
			<-arrived
			clk.Advance(time.Second)
		}()
		_, err := get(t, &http.Client{Transport: tr}, srv.URL)
		if !errors.Is(err, breaker.ErrTimeout) {
			t.Errorf("GET = %v, want ErrTimeout", err)
		}
		if tot := tr.Breakers()[0].Snapshot().Totals; tot.Timeouts != 1 || tot.Admitted != 1 {
			t.Errorf("totals %+v, want one timeout", tot)
		}
	})
	t.Run("a response in time keeps its body readable after the deadline", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		srv := statusServer(t)
		cfg := small
		cfg.Clock = clk
		cfg.CallTimeout = time.Second
		tr := breaker.NewTransport(srv.Client().Transport, breaker.TransportConfig{Config: cfg})
		resp, err := get(t, &http.Client{Transport: tr}, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour) // the call ended with its headers: no timeout any more
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != "hello" {
			t.Errorf("body %q, %v", body, err)
		}
		if err := resp.Body.Close(); err != nil {
			t.Error(err)
		}
		if tot := tr.Breakers()[0].Snapshot().Totals; tot.Successes != 1 || tot.Timeouts != 0 {
			t.Errorf("totals %+v", tot)
		}
		if resp.Request.Context().Err() == nil {
			t.Error("closing the body did not release the call's context")
		}
	})
	t.Run("an invalid config fails every request", func(t *testing.T) {
		tr := breaker.NewTransport(nil, breaker.TransportConfig{Config: breaker.Config{FailureRateThreshold: 200}})
		_, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil))
		if !errors.Is(err, breaker.ErrInvalidConfig) {
			t.Errorf("RoundTrip = %v", err)
		}
	})
}
