package collector

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Auth holds the middlewares that protect the JSON API: Read for reading,
// Operate for issuing commands. A nil middleware lets every request
// through (tests, or a deliberately open server).
type Auth struct {
	Read, Operate echo.MiddlewareFunc
}

// ActorKey is the echo context key under which an Operate middleware may
// store the authenticated user's name (a string); when set it is the
// command's actor, whatever the request body says.
const ActorKey = "cbdash.actor"

// Mount registers the collector's endpoints on e:
//
//	GET  /api/v1/agent      agent websocket (agent token)
//	POST /api/v1/ingest     one hello + batch as JSON (agent token)
//	GET  /healthz, /readyz  liveness, readiness (open)
//	GET  /metrics           Prometheus (open, or Config.MetricsToken)
//	GET  /api/v1/services, /breakers, /breakers/:service/:breaker,
//	     /breakers/:service/:breaker/history, .../gaps, /transitions, /commands,
//	     /commands/:id, /events (server-sent events)   auth.Read
//	POST /api/v1/commands                              auth.Operate
//	/api/v1/holds...                                   see mountHolds
//
// Handlers return errors wrapping cbdash.ErrInvalid, ErrNotFound,
// ErrUnauthorized or ErrForbidden; e's HTTPErrorHandler maps them to
// statuses.
func (c *Collector) Mount(e *echo.Echo, auth Auth) {
	read, operate := orPass(auth.Read), orPass(auth.Operate)
	e.GET("/healthz", c.healthz)
	e.GET("/readyz", c.readyz)
	e.GET("/metrics", c.metricsHandler)
	e.GET("/api/v1/agent", c.handleAgent)
	e.POST("/api/v1/ingest", c.handleIngest)
	e.GET("/api/v1/services", c.getServices, read)
	e.GET("/api/v1/breakers", c.getBreakers, read)
	e.GET("/api/v1/breakers/:service/:breaker", c.getBreaker, read)
	e.GET("/api/v1/breakers/:service/:breaker/history", c.getHistory, read)
	e.GET("/api/v1/breakers/:service/:breaker/gaps", c.getGaps, read)
	e.GET("/api/v1/transitions", c.getTransitions, read)
	e.GET("/api/v1/commands", c.getCommands, read)
	e.POST("/api/v1/commands", c.postCommand, operate)
	e.GET("/api/v1/commands/:id", c.getCommand, read)
	e.GET("/api/v1/events", c.streamEvents, read)
	c.mountHolds(e, read, operate)
}

func orPass(m echo.MiddlewareFunc) echo.MiddlewareFunc {
	if m != nil {
		return m
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", cbdash.ErrInvalid, fmt.Sprintf(format, args...))
}

func (c *Collector) healthz(ec echo.Context) error {
	return ec.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is 200 {"status": "ready"} once Run has restored live state
// while the store answers and can commit (store.Writable); else 503 with
// {"status": ..., "error": why}.
func (c *Collector) readyz(ec echo.Context) error {
	if !c.isReady() {
		return ec.JSON(http.StatusServiceUnavailable, map[string]string{"status": "starting or stopping"})
	}
	ctx := ec.Request().Context()
	if _, err := c.store.LastSeq(ctx, "", "", 0); err != nil {
		return ec.JSON(http.StatusServiceUnavailable, map[string]string{"status": "store unavailable", "error": err.Error()})
	}
	if err := c.store.Writable(ctx); err != nil {
		c.log.Warn("readiness: the store cannot commit", "err", err)
		return ec.JSON(http.StatusServiceUnavailable, map[string]string{"status": "store cannot commit", "error": err.Error()})
	}
	return ec.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

func (c *Collector) metricsHandler(ec echo.Context) error {
	if t := c.cfg.MetricsToken; t != "" {
		if subtle.ConstantTimeCompare([]byte(bearer(ec.Request())), []byte(t)) != 1 {
			return fmt.Errorf("metrics token: %w", cbdash.ErrUnauthorized)
		}
	}
	promhttp.HandlerFor(c.cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP(ec.Response(), ec.Request())
	return nil
}

func (c *Collector) getServices(ec echo.Context) error {
	return ec.JSON(http.StatusOK, c.Services())
}

// getBreakers lists dependencies, optionally of one service (?service=).
func (c *Collector) getBreakers(ec echo.Context) error {
	deps := c.Dependencies()
	if svc := ec.QueryParam("service"); svc != "" {
		kept := deps[:0]
		for _, d := range deps {
			if d.Service == svc {
				kept = append(kept, d)
			}
		}
		deps = kept
	}
	return ec.JSON(http.StatusOK, deps)
}

func depKey(ec echo.Context) (cbdash.DependencyKey, error) {
	svc, err1 := url.PathUnescape(ec.Param("service"))
	br, err2 := url.PathUnescape(ec.Param("breaker"))
	if err1 != nil || err2 != nil {
		return cbdash.DependencyKey{}, invalidf("bad escape in the path")
	}
	return cbdash.DependencyKey{Service: svc, Breaker: br}, nil
}

func (c *Collector) getBreaker(ec echo.Context) error {
	k, err := depKey(ec)
	if err != nil {
		return err
	}
	d, err := c.Dependency(k)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, d)
}

// getHistory serves ?from=&to= (RFC 3339 or Unix ms; default the last
// hour), ?resolution=second|minute|hour and ?instance=.
func (c *Collector) getHistory(ec echo.Context) error {
	k, err := depKey(ec)
	if err != nil {
		return err
	}
	q := cbdash.HistoryQuery{DependencyKey: k, Instance: ec.QueryParam("instance")}
	if q.From, q.To, err = c.timeRange(ec, time.Hour); err != nil {
		return err
	}
	switch r := cbdash.Resolution(ec.QueryParam("resolution")); r {
	case "", cbdash.ResolutionSecond, cbdash.ResolutionMinute, cbdash.ResolutionHour:
		q.Resolution = r
	default:
		return invalidf("resolution %q is not second, minute or hour", truncate(string(r), 20))
	}
	if _, err := c.Dependency(k); err != nil && !knownInStore(ec, c, k) {
		return err
	}
	pts, err := c.store.History(ec.Request().Context(), q)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, pts)
}

// getGaps serves the gaps of a dependency's history (time whose reports
// an agent dropped under memory pressure), ?from=&to= as for history.
func (c *Collector) getGaps(ec echo.Context) error {
	k, err := depKey(ec)
	if err != nil {
		return err
	}
	q := cbdash.HistoryQuery{DependencyKey: k}
	if q.From, q.To, err = c.timeRange(ec, time.Hour); err != nil {
		return err
	}
	if _, err := c.Dependency(k); err != nil && !knownInStore(ec, c, k) {
		return err
	}
	gaps, err := c.store.Gaps(ec.Request().Context(), q)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, gaps)
}

// knownInStore reports whether the store has any transition of k, so the
// history of a breaker no instance reports any more is still served.
func knownInStore(ec echo.Context, c *Collector, k cbdash.DependencyKey) bool {
	ts, err := c.store.Transitions(ec.Request().Context(), cbdash.TransitionQuery{Service: k.Service, Breaker: k.Breaker, Limit: 1})
	return err == nil && len(ts) > 0
}

func (c *Collector) getTransitions(ec echo.Context) error {
	q := cbdash.TransitionQuery{
		Service: ec.QueryParam("service"), Breaker: ec.QueryParam("breaker"), Instance: ec.QueryParam("instance"),
	}
	var err error
	if ec.QueryParam("from") != "" || ec.QueryParam("to") != "" {
		if q.From, q.To, err = c.timeRange(ec, 24*time.Hour); err != nil {
			return err
		}
	}
	if q.Limit, err = limit(ec, 10000); err != nil {
		return err
	}
	ts, err := c.store.Transitions(ec.Request().Context(), q)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, ts)
}

func (c *Collector) getCommands(ec echo.Context) error {
	q := cbdash.CommandQuery{Service: ec.QueryParam("service"), Breaker: ec.QueryParam("breaker")}
	var err error
	if q.Limit, err = limit(ec, 10000); err != nil {
		return err
	}
	cmds, err := c.store.Commands(ec.Request().Context(), q)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, cmds)
}

func (c *Collector) getCommand(ec echo.Context) error {
	cmd, err := c.store.Command(ec.Request().Context(), ec.Param("id"))
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusOK, cmd)
}

// postCommand issues a command from a JSON cbdash.CommandRequest (ttl in
// nanoseconds as a number, or a Go duration string such as "10m").
func (c *Collector) postCommand(ec echo.Context) error {
	var body struct {
		cbdash.CommandRequest
		TTL json.RawMessage `json:"ttl"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(ec.Response(), ec.Request().Body, 64<<10))
	if err := dec.Decode(&body); err != nil {
		return invalidf("command request: %s", jsonReason(err))
	}
	req := body.CommandRequest
	ttl, err := parseTTL(body.TTL)
	if err != nil {
		return err
	}
	req.TTL = ttl
	if actor, ok := ec.Get(ActorKey).(string); ok && actor != "" {
		req.Actor = actor
	}
	cmd, err := c.Issue(ec.Request().Context(), req)
	if err != nil {
		return err
	}
	return ec.JSON(http.StatusCreated, cmd)
}

func parseTTL(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil {
		return time.Duration(n), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, invalidf("ttl must be nanoseconds or a duration string")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalidf("ttl: %v", err)
	}
	return d, nil
}

// timeRange reads ?from= and ?to= (RFC 3339 or Unix ms); to defaults to
// now and from to `back` before to.
func (c *Collector) timeRange(ec echo.Context, back time.Duration) (from, to time.Time, err error) {
	to = c.now().UTC()
	if v := ec.QueryParam("to"); v != "" {
		if to, err = parseTime("to", v); err != nil {
			return
		}
	}
	from = to.Add(-back)
	if v := ec.QueryParam("from"); v != "" {
		if from, err = parseTime("from", v); err != nil {
			return
		}
	}
	if !from.Before(to) {
		err = invalidf("from must be before to")
	}
	return
}

func parseTime(field, v string) (time.Time, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, invalidf("%s must be RFC 3339 or Unix milliseconds", field)
	}
	return t.UTC(), nil
}

func limit(ec echo.Context, most int) (int, error) {
	v := ec.QueryParam("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > most {
		return 0, invalidf("limit must be within 0..%d", most)
	}
	return n, nil
}

// sseBuffer is the event buffer of a server-sent event stream.
const sseBuffer = 1024

// streamEvents serves GET /api/v1/events as server-sent events: each
// cbdash.Event as "event: <kind>" and one JSON line. ?kind= (comma list)
// filters kinds; ?snapshot=1 first sends the current dependencies as a
// "snapshot" event. The stream ends when the subscriber is dropped for
// falling behind; clients reconnect.
func (c *Collector) streamEvents(ec echo.Context) error {
	var kinds map[string]bool
	for k := range strings.SplitSeq(ec.QueryParam("kind"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			if kinds == nil {
				kinds = make(map[string]bool)
			}
			kinds[k] = true
		}
	}
	// A stream goes through the network: it gets a deeper buffer than an
	// in-process subscriber, and only the kinds it asked for.
	snap, sub := c.live.subscribe(kinds, max(c.cfg.SubscriberBuffer, sseBuffer))
	defer c.hub.remove(sub)
	events := sub.ch
	w := ec.Response()
	rc := http.NewResponseController(w)
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
		return rc.Flush()
	}
	if ec.QueryParam("snapshot") == "1" {
		if err := write("snapshot", snap); err != nil {
			return nil
		}
	} else if err := rc.Flush(); err != nil {
		return nil
	}
	keepalive := time.NewTicker(15 * time.Second) // real time: keeps proxies from closing the stream
	defer keepalive.Stop()
	ctx := ec.Request().Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-keepalive.C:
			_ = rc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return nil
			}
		case e, ok := <-events:
			if !ok {
				return nil
			}
			if err := write(e.Kind, e); err != nil {
				return nil
			}
		}
	}
}
