package web

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash"
)

// metrics are the dashboard's Prometheus series.
type metrics struct {
	// loginRefused counts logins refused before their password was
	// checked, by limit: "user", "device", "address" (the login limiter)
	// or "busy"
	// (no bcrypt slot in time).
	loginRefused *prometheus.CounterVec
	// logins counts checked logins by result: ok, failed, disabled, error.
	logins *prometheus.CounterVec
	// streamsRefused counts streams refused over a cap (LiveLimits), by
	// stream ("live": /live sockets, "events": /api/v1/events) and limit
	// ("session", "address", "total").
	streamsRefused *prometheus.CounterVec
	// readsRefused counts GET and HEAD requests answered 503 over a cap
	// (ReadLimits), by limit ("address", "total").
	readsRefused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		loginRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_login_refused_total",
			Help: "Login attempts refused before the password was checked, by limit (user, device, address, busy).",
		}, []string{"limit"}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_logins_total",
			Help: "Login attempts whose password was checked, by result (ok, failed, disabled, error).",
		}, []string{"result"}),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_streams_refused_total",
			Help: "Live sockets (stream=live) and event streams (stream=events) refused with 429 over a cap, by limit (session, address, total).",
		}, []string{"stream", "limit"}),
		readsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbdash_reads_refused_total",
			Help: "GET and HEAD requests (pages and API reads) answered 503 because their client address (limit=address) or the server (limit=total) had the most being answered at once.",
		}, []string{"limit"}),
	}
	for _, c := range []prometheus.Collector{m.loginRefused, m.logins, m.streamsRefused, m.readsRefused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) loginResult(err error) {
	r := "ok"
	switch {
	case err == nil:
	case errors.Is(err, errDisabled):
		r = "disabled"
	case errors.Is(err, cbdash.ErrUnauthorized):
		r = "failed"
	default:
		r = "error"
	}
	m.logins.WithLabelValues(r).Inc()
}
