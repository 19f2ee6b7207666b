package web

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// ReadLimits cap the GET and HEAD requests being answered at once, per
// client address and in total. A page or an API read is rendered whole
// before it is written (the overview at 10,000 dependencies, or
// /api/v1/breakers, is several MB): a client that sends requests and
// never reads the answers keeps each of them in memory until the write
// times out (--write-timeout), so without a cap one address could make
// the server hold gigabytes. With it, one address holds at most
// PerAddress answers and the server Total. A read over a cap is answered
// 503 with Retry-After at once, before anything is rendered. Websockets
// (/live, the agents'), the event stream (they have caps of their own),
// health, readiness and metrics are not counted. The zero value of each
// field is its default; the serve flags of the same names set them.
type ReadLimits struct {
	// PerAddress caps the reads being answered to one client address (as
	// TrustedProxies makes it out); 0 = 32: a browser opens about 6
	// connections to a host, and an office behind one NAT several browsers.
	PerAddress int
	// Total caps the reads being answered by the server; 0 = 256.
	Total int
}

func (l *ReadLimits) setDefaults() {
	if l.PerAddress == 0 {
		l.PerAddress = 32
	}
	if l.Total == 0 {
		l.Total = 256
	}
}

// readNames are the reads' words in their refusals (reads have no cap per
// session: the cap applies before the caller is identified).
var readNames = slotNames{what: "requests being answered", totalFlag: "--max-reads", addressFlag: "--max-reads-per-address"}

// limitReads is the middleware that holds reads to Config.Reads (see
// ReadLimits).
func (s *Server) limitReads(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !countedRead(r) {
			return next(c)
		}
		release, refused := s.reads.take("", c.RealIP())
		if release == nil {
			c.Response().Header().Set("Retry-After", "1")
			return echo.NewHTTPError(http.StatusServiceUnavailable, refused)
		}
		defer release()
		return next(c)
	}
}

// countedRead reports whether r counts against ReadLimits: a GET or HEAD
// that is not a websocket, the event stream, or a probe of health,
// readiness or metrics.
func countedRead(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return false
	}
	switch r.URL.Path {
	case "/api/v1/events", "/healthz", "/readyz", "/metrics":
		return false
	}
	return true
}
