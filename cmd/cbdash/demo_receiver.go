package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
)

// demoRuleName names the alert rule the demo keeps pointed at its
// receiver (made at the first start, its webhook URL set at every start:
// the receiver's port changes).
const demoRuleName = "demo: checkout's inventory breaker opens (to the demo's receiver)"

// demoReceiver is the demo's built-in alert receiver: a webhook endpoint
// on a loopback port of its own that answers 204 to every POST and
// prints a line per notification to the demo's output, so that a
// newcomer sees an alert arrive without setting up a receiver.
type demoReceiver struct {
	url  string
	srv  *http.Server
	ln   net.Listener
	mu   sync.Mutex // serializes writes to out
	out  io.Writer
	done chan struct{}
}

// startDemoReceiver listens on 127.0.0.1 (a free port) and serves until
// close.
func startDemoReceiver(out io.Writer) (*demoReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: alert receiver: %w", err)
	}
	r := &demoReceiver{url: "http://" + ln.Addr().String() + "/alerts", ln: ln, out: out, done: make(chan struct{})}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

func (r *demoReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "the demo's alert receiver takes POSTs", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading the body", http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.out, "demo alert receiver got: %s\n", clean(notificationLine(body)))
}

// notificationLine is a notification in one line: its "text", "summary"
// or "title" (the generic, Slack and other payloads say it there), else
// the body, compacted and cut at 200 bytes.
func notificationLine(body []byte) string {
	var m map[string]any
	if json.Unmarshal(body, &m) == nil {
		for _, k := range []string{"text", "summary", "title"} {
			if s, ok := m[k].(string); ok && s != "" {
				return strings.Join(strings.Fields(s), " ")
			}
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, body) != nil {
		b.Reset()
		b.Write(body)
	}
	s := strings.Join(strings.Fields(b.String()), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func (r *demoReceiver) close(ctx context.Context) {
	if err := r.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = r.srv.Close()
	}
	<-r.done
}

// pointDemoRule makes (or points again) the demo's alert rule at the
// receiver at url: checkout's inventory breaker opening, which the demo's
// script makes happen every few minutes. Through the alert service, as
// the page and the API would (the demo allows loopback webhooks).
func pointDemoRule(ctx context.Context, as *alert.Service, url string, log *slog.Logger) {
	rules, err := as.Rules(ctx)
	if err != nil {
		log.Warn("demo: alert rules", "err", err)
		return
	}
	for _, r := range rules {
		if r.Name == demoRuleName {
			r.WebhookURL = url
			if err := as.UpdateRule(ctx, r); err != nil {
				log.Warn("demo: pointing the demo's alert rule at its receiver", "err", err)
			}
			return
		}
	}
	if _, err := as.CreateRule(ctx, cbdash.AlertRule{Name: demoRuleName, Service: "checkout", Breaker: "inventory",
		Kind: cbdash.AlertOpen, WebhookURL: url}); err != nil {
		log.Warn("demo: making the demo's alert rule", "err", err)
	}
}
