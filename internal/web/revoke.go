package web

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
)

// liveRecheck is how often an open live socket checks that its caller's
// session or API token is still valid (a disabled user, a revoked token
// or a logout elsewhere ends it within that time).
const liveRecheck = 2 * time.Second

// whileAuthorized returns a context that ends with ctx or as soon as the
// credentials c was identified by stop being valid, and a function that
// reports whether the latter happened. Anonymous callers are not
// rechecked. The goroutine it starts ends with the returned context.
func (s *Server) whileAuthorized(ctx context.Context, c echo.Context) (context.Context, func() bool) {
	var revoked atomic.Bool
	check := s.credentialCheck(c)
	if check == nil {
		return ctx, revoked.Load
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		t := time.NewTicker(liveRecheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !check(ctx) && ctx.Err() == nil {
					revoked.Store(true)
					return
				}
			}
		}
	}()
	return ctx, revoked.Load
}

// credentialCheck returns a function that reports whether the session or
// API token of c is still valid, or nil for an anonymous caller. A store
// error other than a refusal counts as still valid (the next check will
// tell).
func (s *Server) credentialCheck(c echo.Context) func(context.Context) bool {
	refused := func(err error) bool {
		return errors.Is(err, cbdash.ErrUnauthorized) || errors.Is(err, cbdash.ErrNotFound)
	}
	switch via, _ := c.Get(viaKey).(string); via {
	case "token":
		tok := strings.TrimSpace(strings.TrimPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer "))
		return func(ctx context.Context) bool { _, err := s.cfg.Sessions.UserByToken(ctx, tok); return !refused(err) }
	case "session":
		ck, err := c.Cookie(sessionCookie)
		if err != nil {
			return nil
		}
		return func(ctx context.Context) bool {
			_, err := s.cfg.Sessions.SessionUser(ctx, ck.Value, s.now())
			return !refused(err)
		}
	}
	return nil
}
