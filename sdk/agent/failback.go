package agent

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// failbackChecks is the fewest ready answers in a row after which an
// agent moves back to its preferred collector (over at least
// Config.FailbackAfter).
const failbackChecks = 3

// readyzURL is the readiness endpoint of the collector whose agent
// endpoint is wsURL: ws becomes http and wss https, and the path's
// "/api/v1/agent" (with anything after it) becomes "/readyz", keeping a
// prefix a proxy may add (wss://host/cbdash/api/v1/agent gives
// https://host/cbdash/readyz). A path without "/api/v1/agent" gives
// "/readyz" at the root. The query and fragment are dropped.
func readyzURL(wsURL string) (string, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "wss":
		u.Scheme = "https"
	default:
		u.Scheme = "http"
	}
	prefix, _, found := strings.Cut(u.EscapedPath(), "/api/v1/agent")
	if !found {
		prefix = ""
	}
	escaped := strings.TrimSuffix(prefix, "/") + "/readyz"
	if u.Path, err = url.PathUnescape(escaped); err != nil {
		return "", err
	}
	u.RawPath = escaped
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

// watchPreferred asks the preferred collector (agent endpoint preferred)
// whether it is ready, on a ticker of the agent's Clock whose period is
// Config.FailbackAfter/3 jittered within ±25% (drawn once per session, so
// that the checks of a fleet spread out), and closes moveBack once it has
// answered ready on at least failbackChecks checks in a row spanning at
// least FailbackAfter. Any other answer starts the count again. It returns
// when ctx ends or after closing moveBack.
func (a *Agent) watchPreferred(ctx context.Context, preferred string, moveBack chan<- struct{}) {
	target, err := readyzURL(preferred)
	if err != nil { // cannot happen: Config checked the URL
		a.log.Warn("cannot derive the preferred collector's /readyz; no failback", "url", preferred, "error", err)
		return
	}
	period := a.cfg.FailbackAfter / 3
	period = period*3/4 + rand.N(period/2+1)
	ticks, stop := a.cfg.Clock.NewTicker(period)
	defer stop()
	var (
		since time.Time // when the first ready answer of the current run arrived
		ready int       // ready answers in a row
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		if !a.ready(ctx, target, period) {
			ready = 0
			continue
		}
		// The answer's time, not the tick's: a check sent before the
		// collector became ready may be answered after it, and counting
		// from the tick would move the fleet back early.
		now := a.cfg.Clock.Now()
		if ready == 0 {
			since = now
		}
		ready++
		if ready >= failbackChecks && now.Sub(since) >= a.cfg.FailbackAfter {
			close(moveBack)
			return
		}
	}
}

// ready reports whether GET target answers 200 within timeout (at most
// HandshakeTimeout), with Config.HTTPClient, no token, on a connection
// closed after it.
func (a *Agent) ready(ctx context.Context, target string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, min(timeout, a.cfg.HandshakeTimeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return false
	}
	// No keep-alive: an idle connection per agent would count against the
	// preferred collector's connection caps (per address behind a NAT)
	// while the fleet is elsewhere, and linger beside its websockets after
	// the fleet moves back.
	req.Close = true
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode == http.StatusOK
}
