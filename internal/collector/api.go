package collector

import (
	"context"
	"crypto/subtle"
	"encoding/json"

	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/ingest"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The collector's surface for the HTTP layer (internal/web serves every
// route): plain methods over the live state and the store, the actor of
// every audited action passed explicitly, and the transports that are
// streams of their own (the agent websocket, the HTTP ingest, the event
// stream) as net/http handlers that return the error to answer, for the
// server's one error handler.

// errNoActor refuses an audited action that names nobody.
var errNoActor = fmt.Errorf("%w: actor is required: it goes into the audit log", cbdash.ErrInvalid)

// Issue records an operator command by actor (its Name is the command's
// actor in the audit log, whatever req.Actor says) and sends it; see
// issue for what each action does. Errors: cbdash.ErrInvalid for a zero
// actor or a bad field, and those of issue.
func (c *Collector) Issue(ctx context.Context, actor cbdash.Actor, req cbdash.CommandRequest) (cbdash.Command, error) {
	if actor.IsZero() {
		return cbdash.Command{}, errNoActor
	}
	req.Actor = actor.Name
	return c.issue(ctx, req)
}

// CreateHold stores a hold by actor (req.Actor is replaced by its Name)
// and applies it; see createHold. Errors: cbdash.ErrInvalid for a zero
// actor, and those of createHold.
func (c *Collector) CreateHold(ctx context.Context, actor cbdash.Actor, req cbdash.HoldRequest) (cbdash.HoldRecord, error) {
	if actor.IsZero() {
		return cbdash.HoldRecord{}, errNoActor
	}
	req.Actor = actor.Name
	return c.createHold(ctx, req)
}

// ReleaseHold ends hold id by actor with reason; see releaseHold.
// Errors: cbdash.ErrInvalid for a zero actor, and those of releaseHold.
func (c *Collector) ReleaseHold(ctx context.Context, actor cbdash.Actor, id, reason string) (cbdash.HoldRecord, error) {
	if actor.IsZero() {
		return cbdash.HoldRecord{}, errNoActor
	}
	return c.releaseHold(ctx, id, actor.Name, reason)
}

// Readiness reports whether the collector is ready: status "ready" and a
// nil error once Run has restored live state while the store answers and
// can commit (store.Writable); else the status that is not ready
// ("starting or stopping", "store unavailable", "store cannot commit")
// with its cause (nil while starting or stopping). While the store is
// failing (storehealth.go: batches failed for the store's sake, or its
// probe failed) it is "store cannot commit" with the last error, until a
// probe succeeds (every StoreProbeEvery, and at once after a commit).
func (c *Collector) Readiness(ctx context.Context) (status string, cause error) {
	if !c.ing.Accepting() {
		return "starting or stopping", nil
	}
	if err := c.ing.StoreErr(); err != nil {
		return "store cannot commit", err
	}
	if _, err := c.store.LastSeq(ctx, "", "", 0); err != nil {
		return "store unavailable", err
	}
	if err := c.store.Writable(ctx); err != nil {
		if ctx.Err() == nil { // not the asker gone or the server stopping
			c.log.Warn("readiness: the store cannot commit", "err", err)
		}
		return "store cannot commit", err
	}
	return "ready", nil
}

// ServeMetrics answers the Prometheus exposition of Config.Gatherer; with
// Config.MetricsToken set, only to "Authorization: Bearer <token>"
// (otherwise an error wrapping cbdash.ErrUnauthorized, nothing written).
func (c *Collector) ServeMetrics(w http.ResponseWriter, r *http.Request) error {
	if t := c.cfg.MetricsToken; t != "" {
		if subtle.ConstantTimeCompare([]byte(ingest.Bearer(r)), []byte(t)) != 1 {
			return fmt.Errorf("metrics token: %w", cbdash.ErrUnauthorized)
		}
	}
	promhttp.HandlerFor(c.cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

// History returns the stored history of q's dependency (see
// store.History), also of a dependency no instance reports any more as
// long as the store has a transition of it. Errors: cbdash.ErrNotFound
// for a dependency known neither live nor in the store, or the store's.
func (c *Collector) History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error) {
	if err := c.known(ctx, q.DependencyKey); err != nil {
		return nil, err
	}
	return c.store.History(ctx, q)
}

// Gaps returns the gaps of q's dependency's history (time whose reports an
// agent dropped under memory pressure) between q.From and q.To; errors
// as History.
func (c *Collector) Gaps(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Gap, error) {
	if err := c.known(ctx, q.DependencyKey); err != nil {
		return nil, err
	}
	return c.store.Gaps(ctx, q)
}

// known is nil when k is live or the store has any transition of it, so
// the history of a breaker no instance reports any more is still served.
func (c *Collector) known(ctx context.Context, k cbdash.DependencyKey) error {
	_, err := c.Dependency(k)
	if err == nil {
		return nil
	}
	ts, terr := c.store.Transitions(ctx, cbdash.TransitionQuery{Service: k.Service, Breaker: k.Breaker, Limit: 1})
	if terr == nil && len(ts) > 0 {
		return nil
	}
	return err
}

// sseBuffer is the event buffer of a server-sent event stream.
const sseBuffer = 1024

// ServeEvents serves a server-sent event stream (GET /api/v1/events):
// each cbdash.Event as "event: <kind>" and one JSON line, its shown rates
// in words as the JSON API gives them (wording.Worded). ?kind= (comma
// list) filters kinds; ?snapshot=1 first sends the current dependencies
// as a "snapshot" event. The stream ends when the subscriber is dropped
// for falling behind (clients reconnect) or the request ends; it returns
// no error once the stream has begun.
//
// The stream has its own liveness, not the HTTP server's deadlines,
// which bound plain requests: it clears them (http.Server.WriteTimeout
// would otherwise end it), and bounds each write it makes by
// WriteTimeout alone, clearing the deadline again once the write is
// through: over HTTP/2 a deadline that passes resets the stream even
// when no write is under way (it did, 10 s after an event with no other
// behind it).
func (c *Collector) ServeEvents(w http.ResponseWriter, r *http.Request) error {
	// A stream goes through the network: it gets a deeper buffer than an
	// in-process subscriber, and only the kinds it asked for.
	snap, events, cancel := c.live.Subscribe(eventKinds(r.URL.Query().Get("kind")), max(c.cfg.SubscriberBuffer, sseBuffer))
	defer cancel()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	write := func(kind string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_ = rc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, data); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil {
			return err
		}
		_ = rc.SetWriteDeadline(time.Time{})
		return nil
	}
	if r.URL.Query().Get("snapshot") == "1" {
		for i := range snap {
			snap[i] = wording.Worded(snap[i])
		}
		if err := write("snapshot", snap); err != nil {
			return nil
		}
	} else {
		_ = rc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
		if err := rc.Flush(); err != nil {
			return nil
		}
		_ = rc.SetWriteDeadline(time.Time{})
	}
	c.streamEvents(r.Context(), rc, w, events, write)
	return nil
}

// eventKinds is the set of a comma list of event kinds; nil (every kind)
// when it names none.
func eventKinds(list string) map[string]bool {
	var kinds map[string]bool
	for k := range strings.SplitSeq(list, ",") {
		if k = strings.TrimSpace(k); k != "" {
			if kinds == nil {
				kinds = make(map[string]bool)
			}
			kinds[k] = true
		}
	}
	return kinds
}

// streamEvents writes events with write, and a keepalive comment every
// 15 s of quiet, until ctx ends, events closes or a write fails.
func (c *Collector) streamEvents(ctx context.Context, rc *http.ResponseController, w io.Writer, events <-chan cbdash.Event, write func(string, any) error) {
	keepalive := time.NewTicker(15 * time.Second) // real time: keeps proxies from closing the stream
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			_ = rc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			_ = rc.SetWriteDeadline(time.Time{})
		case e, ok := <-events:
			if !ok {
				return
			}
			if e.Dependency != nil { // shared with every subscriber: worded in a copy
				d := wording.Worded(*e.Dependency)
				e.Dependency = &d
			}
			if err := write(e.Kind, e); err != nil {
				return
			}
		}
	}
}
