package web

import (
	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/collector"
)

// Auth returns the middlewares that protect the collector's JSON API.
// Both accept a user API token ("Authorization: Bearer <token>", for the
// CLI) or a dashboard session cookie (with Anonymous, Read also lets
// anonymous callers through). Read needs the viewer role, Operate the
// operator role and, for session callers, the CSRF token in the
// X-CSRF-Token header; Operate also puts the caller's name under
// collector.ActorKey so that commands are recorded as issued by them.
// Missing or unknown credentials are 401, too small a role 403.
func (s *Server) Auth() collector.Auth {
	return collector.Auth{
		Read: chain(s.identify, s.require(cbdash.RoleViewer)),
		Operate: chain(s.identify, s.csrf(), s.require(cbdash.RoleOperator), func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				c.Set(collector.ActorKey, userOf(c).Name)
				return next(c)
			}
		}),
	}
}

// chain composes middlewares; the first runs first.
func chain(ms ...echo.MiddlewareFunc) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		for i := len(ms) - 1; i >= 0; i-- {
			next = ms[i](next)
		}
		return next
	}
}
