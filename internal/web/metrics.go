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
	}
	for _, c := range []prometheus.Collector{m.loginRefused, m.logins} {
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
