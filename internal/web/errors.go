package web

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

const loggerKey = "cbdash.logger"

// withLogger puts the server's logger in the request context so that
// HTTPErrorHandler, a plain function, can log internal errors.
func (s *Server) withLogger(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Set(loggerKey, s.log)
		return next(c)
	}
}

// HTTPErrorHandler is the one error handler of the cbdash server (set it
// as echo's HTTPErrorHandler). It maps errors wrapping cbdash.ErrNotFound
// to 404, ErrInvalid to 400, ErrUnauthorized to 401, ErrForbidden to 403,
// ErrConflict to 409, ErrUnavailable to 503 (its reason as the message),
// passes *echo.HTTPError through as is, and turns
// anything else into a 500 whose cause is logged (with the logger Mount
// installs) but not shown. It answers {"error": "..."} as JSON for paths
// under /api/ and for clients that accept application/json, an HTML page
// otherwise.
func HTTPErrorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, msg := statusOf(err)
	if status == http.StatusInternalServerError {
		log, _ := c.Get(loggerKey).(*slog.Logger)
		if log != nil {
			log.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
		}
		msg = "internal error"
	}
	var werr error
	switch {
	case c.Request().Method == http.MethodHead:
		werr = c.NoContent(status)
	case wantsJSON(c.Request()):
		werr = c.JSON(status, map[string]string{"error": msg})
	default:
		werr = render(c, status, templates.ErrorPage(status, http.StatusText(status), msg, backOf(c.Request())))
	}
	if werr != nil {
		if log, _ := c.Get(loggerKey).(*slog.Logger); log != nil {
			log.Warn("writing error response", "err", werr)
		}
	}
}

func statusOf(err error) (int, string) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over the limit of %d bytes", tooLarge.Limit)
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok && m != "" {
			msg = m
		}
		return he.Code, msg
	}
	for _, m := range []struct {
		err    error
		status int
	}{
		{cbdash.ErrNotFound, http.StatusNotFound},
		{cbdash.ErrInvalid, http.StatusBadRequest},
		{cbdash.ErrUnauthorized, http.StatusUnauthorized},
		{cbdash.ErrForbidden, http.StatusForbidden},
		{cbdash.ErrConflict, http.StatusConflict},
		{cbdash.ErrUnavailable, http.StatusServiceUnavailable},
	} {
		if errors.Is(err, m.err) {
			return m.status, userMessage(err)
		}
	}
	return http.StatusInternalServerError, ""
}

// internalPrefixes are package prefixes of error messages that mean
// nothing to a user ("store: incident 7: not found").
var internalPrefixes = []string{"store: ", "collector: ", "web: "}

// userMessage is err's message as a user should read it: without a
// leading package prefix, and a not-found error reads "incident 7 not
// found" rather than "incident 7: not found" or "not found: incident 7";
// one whose last part already says what is missing ("no alert of rule 3
// is firing on checkout/payments: not found") loses the suffix instead.
func userMessage(err error) string {
	msg := err.Error()
	for _, p := range internalPrefixes {
		msg = strings.TrimPrefix(msg, p)
	}
	if errors.Is(err, cbdash.ErrUnavailable) { // the reason alone: "collector is not ready"
		return strings.TrimSuffix(msg, ": "+cbdash.ErrUnavailable.Error())
	}
	if !errors.Is(err, cbdash.ErrNotFound) {
		return msg
	}
	nf := cbdash.ErrNotFound.Error()
	if rest, ok := strings.CutSuffix(msg, ": "+nf); ok {
		if last := rest[strings.LastIndex(rest, ": ")+1:]; strings.HasPrefix(strings.TrimSpace(last), "no ") {
			return rest
		}
		return rest + " " + nf
	}
	if rest, ok := strings.CutPrefix(msg, nf+": "); ok {
		return rest + " " + nf
	}
	return msg
}

func wantsJSON(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		return true
	}
	accept := r.Header.Get(echo.HeaderAccept)
	return strings.Contains(accept, echo.MIMEApplicationJSON) && !strings.Contains(accept, echo.MIMETextHTML)
}

// backOf is the page a refused form was posted from: the path and query
// of the request's Referer when it is of this server (same host), else
// "" (a GET's error page has no form to go back to).
func backOf(r *http.Request) string {
	if r.Method != http.MethodPost {
		return ""
	}
	u, err := url.Parse(r.Referer())
	if err != nil || u.Host != r.Host || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return ""
	}
	u.Scheme, u.Host, u.User, u.Fragment = "", "", nil, ""
	return u.String()
}
