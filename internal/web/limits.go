package web

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Request body limits, applied to every route before anything reads the
// body (Mount installs limitBodies with e.Pre, so it runs before routing,
// CSRF checks and authentication).
const (
	// DefaultBodyLimit bounds forms and JSON requests: logins, commands,
	// admin forms, alert rules.
	DefaultBodyLimit = 64 << 10
	// IngestBodyLimit bounds POST /api/v1/ingest: one protocol message.
	IngestBodyLimit = protocol.MaxMessageBytes
	// NoteBodyLimit bounds an incident note request (the note itself is at
	// most incident.MaxNoteLen bytes; the rest is room for JSON escapes).
	NoteBodyLimit = 64 << 10
)

// bodyLimit is the largest body accepted on path.
func bodyLimit(path string) int64 {
	switch {
	case path == "/api/v1/ingest":
		return IngestBodyLimit
	case strings.HasSuffix(path, "/notes"):
		return NoteBodyLimit
	}
	return DefaultBodyLimit
}

// limitBodies refuses a request whose declared length is over its
// route's limit with 413 before reading a byte, and caps the reading of
// any other body (chunked or lying about its length) at the limit: the
// read fails there and the request is answered 413 or 400.
func (s *Server) limitBodies(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Body == nil || r.Body == http.NoBody {
			return next(c)
		}
		limit := bodyLimit(r.URL.Path)
		if r.ContentLength > limit {
			r.Close = true // do not read the rest to reuse the connection
			return echo.NewHTTPError(http.StatusRequestEntityTooLarge,
				fmt.Sprintf("request body of %d bytes is over the limit of %d bytes for %s", r.ContentLength, limit, r.URL.Path))
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
		return next(c)
	}
}
