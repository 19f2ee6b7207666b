package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/crypto/bcrypt"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

const (
	sessionCookie = "cbdash_session"
	csrfCookie    = "cbdash_csrf"
	csrfField     = "_csrf"
	csrfHeader    = "X-CSRF-Token"
	userKey       = "cbdash.user"
	viaKey        = "cbdash.via"   // "session", "token" or "anonymous"
	actorKey      = "cbdash.actor" // a cbdash.Actor, set by require
	csrfKey       = "csrf"
	// AdminName is the account EnsureAdmin creates on first start.
	AdminName = "admin"
)

// identify finds who is calling: a Bearer user API token, else a session
// cookie, else (with Anonymous) an anonymous viewer. It never refuses;
// require does.
func (s *Server) identify(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		if h := c.Request().Header.Get(echo.HeaderAuthorization); h != "" {
			tok, ok := strings.CutPrefix(h, "Bearer ")
			if !ok {
				return errorf(cbdash.ErrUnauthorized, "authorization must be a Bearer token")
			}
			u, err := s.cfg.Sessions.UserByToken(ctx, strings.TrimSpace(tok))
			if err != nil {
				return err
			}
			c.Set(userKey, &u)
			c.Set(viaKey, "token")
			return next(c)
		}
		if ck, err := c.Cookie(sessionCookie); err == nil && ck.Value != "" {
			u, err := s.cfg.Sessions.SessionUser(ctx, ck.Value, s.now())
			switch {
			case err == nil:
				c.Set(userKey, &u)
				c.Set(viaKey, "session")
				return next(c)
			case errors.Is(err, cbdash.ErrUnauthorized) || errors.Is(err, cbdash.ErrNotFound):
				s.clearSession(c)
			default:
				return err
			}
		}
		if s.cfg.Anonymous {
			c.Set(userKey, &cbdash.User{Name: "anonymous", Role: cbdash.RoleViewer})
			c.Set(viaKey, "anonymous")
		}
		return next(c)
	}
}

// userOf returns the caller identified by identify, or nil.
func userOf(c echo.Context) *cbdash.User {
	u, _ := c.Get(userKey).(*cbdash.User)
	return u
}

// actorFrom is the caller that require let through, as the actor of an
// audited action (a user by session or by API token); the zero Actor on a
// route without require, which the domain's audited methods refuse.
func actorFrom(c echo.Context) cbdash.Actor {
	a, _ := c.Get(actorKey).(cbdash.Actor)
	return a
}

// IsAdmin reports whether the caller of c, as identified by the
// authentication middleware, has the admin role (for secrets only admins may see, such
// as webhook URLs).
func IsAdmin(c echo.Context) bool {
	u := userOf(c)
	return u != nil && u.Role == cbdash.RoleAdmin
}

func anonymous(c echo.Context) bool { v, _ := c.Get(viaKey).(string); return v == "anonymous" }

// require refuses callers below role: a browser that is not logged in is
// sent to the login page, an API client gets 401; a caller with too
// small a role gets 403. Anonymous viewers count as not logged in for
// anything above viewer.
func (s *Server) require(role string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			u := userOf(c)
			if u == nil || (anonymous(c) && role != cbdash.RoleViewer) {
				if c.Request().Method == http.MethodGet && !wantsJSON(c.Request()) && c.Request().Header.Get("Upgrade") == "" {
					return redirect(c, "/login?next="+url.QueryEscape(c.Request().URL.RequestURI()))
				}
				return errorf(cbdash.ErrUnauthorized, "log in first")
			}
			if !cbdash.RoleAllows(u.Role, role) {
				return errorf(cbdash.ErrForbidden, "%s needs the %s role", c.Request().URL.Path, role)
			}
			kind := cbdash.ActorUser
			if v, _ := c.Get(viaKey).(string); v == "token" {
				kind = cbdash.ActorToken
			}
			c.Set(actorKey, cbdash.UserActor(*u, kind))
			return next(c)
		}
	}
}

// csrf protects every unsafe request of a browser. For a logged-in
// session the token is bound to the session: it is derived from the
// session cookie (sessionCSRF), so a cbdash_csrf cookie planted by a
// sibling subdomain proves nothing. Before login (the login form) it is
// echo's double-submit-cookie middleware: the token of the cbdash_csrf
// cookie in the _csrf form field or the X-CSRF-Token header. In both,
// browsers that send Sec-Fetch-Site: same-origin pass on that alone (a
// sibling subdomain is same-site, not same-origin). Callers using a
// Bearer token are not browsers and skip it. Every failure is a 403.
func (s *Server) csrf() echo.MiddlewareFunc {
	cookie := middleware.CSRFWithConfig(middleware.CSRFConfig{
		Skipper: func(c echo.Context) bool {
			v, _ := c.Get(viaKey).(string)
			return v == "token"
		},
		TokenLookup:    "form:" + csrfField + ",header:" + csrfHeader,
		ContextKey:     csrfKey,
		CookieName:     csrfCookie,
		CookiePath:     "/",
		CookieHTTPOnly: true,
		CookieSecure:   s.cfg.Secure,
		CookieSameSite: http.SameSiteLaxMode,
		ErrorHandler: func(err error, c echo.Context) error {
			return errorf(cbdash.ErrForbidden, "missing or invalid CSRF token")
		},
	})
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		byCookie := cookie(next)
		return func(c echo.Context) error {
			if v, _ := c.Get(viaKey).(string); v != "session" {
				return byCookie(c)
			}
			ck, err := c.Cookie(sessionCookie)
			if err != nil {
				return byCookie(c)
			}
			want := sessionCSRF(ck.Value)
			c.Set(csrfKey, want)
			switch c.Request().Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
				return next(c)
			}
			if c.Request().Header.Get("Sec-Fetch-Site") == "same-origin" {
				return next(c)
			}
			got := c.Request().Header.Get(csrfHeader)
			if got == "" {
				got = c.FormValue(csrfField)
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
				return errorf(cbdash.ErrForbidden, "missing or invalid CSRF token")
			}
			return next(c)
		}
	}
}

// sessionCSRF is the CSRF token of the session whose cookie is session:
// a hash of it under its own label, so the page can carry it without
// revealing the cookie.
func sessionCSRF(session string) string {
	sum := sha256.Sum256([]byte("cbdash csrf\x00" + session))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// page fills the layout's view model for the caller.
func (s *Server) page(c echo.Context, title, nav string) templates.Page {
	p := templates.Page{Title: title, Nav: nav, Now: s.now().UTC().Format(time.RFC3339Nano)}
	p.CSRF, _ = c.Get(csrfKey).(string)
	if u := userOf(c); u != nil {
		if anonymous(c) {
			p.Anon = true
		} else {
			p.User, p.Role = u.Name, u.Role
			p.CanOp = cbdash.RoleAllows(u.Role, cbdash.RoleOperator)
			p.IsAdmin = cbdash.RoleAllows(u.Role, cbdash.RoleAdmin)
		}
	}
	return p
}

func (s *Server) loginPage(c echo.Context) error {
	csrf, _ := c.Get(csrfKey).(string)
	return render(c, http.StatusOK, templates.Login(csrf, localPath(c.QueryParam("next")), "", ""))
}

// login checks a user name and password (bcrypt), rate-limited per
// client IP and per user name (per device for a client with a valid
// device cookie of the user, see loginLimiter), and starts a session.
func (s *Server) login(c echo.Context) error {
	ctx := c.Request().Context()
	name := strings.TrimSpace(c.FormValue("user"))
	next := localPath(c.FormValue("next"))
	csrf, _ := c.Get(csrfKey).(string)
	addr := c.RealIP()
	var device string
	if ck, err := c.Cookie(deviceCookie); err == nil && ck.Value != "" {
		if _, hash, err := s.cfg.Sessions.UserByName(ctx, name); err == nil {
			device = deviceKey(ck.Value, name, hash, s.now())
		}
	}
	ticket, refused, wait := s.logins.reserve(name, device, addr, s.now())
	if refused != "" {
		s.metrics.loginRefused.WithLabelValues(refused).Inc()
		s.log.Warn("login refused by the limiter", "limit", refused, "user", name, "addr", addr, "retry_after", wait.Round(time.Second))
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		return render(c, http.StatusTooManyRequests, templates.Login(csrf, next, name, "Too many attempts. Wait a minute and try again."))
	}
	u, hash, err := s.checkPassword(ctx, name, c.FormValue("password"))
	switch {
	case err == nil:
		ticket.Succeeded(s.now())
		s.setDevice(c.Response(), name, hash)
	case errors.Is(err, cbdash.ErrUnauthorized):
		ticket.Failed(s.now())
	}
	s.metrics.loginResult(err)
	if errors.Is(err, errDisabled) {
		return render(c, http.StatusForbidden, templates.Login(csrf, next, name, "This account is disabled. Ask an admin."))
	}
	if errors.Is(err, cbdash.ErrUnauthorized) {
		return render(c, http.StatusUnauthorized, templates.Login(csrf, next, name, "Wrong user name or password."))
	}
	if err != nil {
		return err
	}
	tok, err := s.cfg.Sessions.CreateSession(ctx, u.ID, s.now().Add(s.cfg.SessionTTL))
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: tok, Path: "/", HttpOnly: true, Secure: s.cfg.Secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(s.cfg.SessionTTL / time.Second),
	})
	return redirect(c, next)
}

// errDisabled is checkPassword's answer for a disabled account.
var errDisabled = errorf(cbdash.ErrForbidden, "the account is disabled")

// dummyHash returns the stand-in hash a login naming no account is
// checked against, made at cost on first use (Config.PasswordCost): it
// keeps the time of a failed login the same whether or not the user
// exists.
func dummyHash(cost int) func() []byte {
	return sync.OnceValue(func() []byte {
		h, err := bcrypt.GenerateFromPassword([]byte("cbdash: no such user"), cost)
		if err != nil { // cost was checked by Config.check
			panic(fmt.Sprintf("web: a bcrypt hash at cost %d: %v", cost, err))
		}
		return h
	})
}

// checkPassword compares a password with the user's bcrypt hash. At most
// Config.MaxHashing comparisons run at once; a login that waits longer
// than hashWait for its turn is refused (503) instead of starving the
// server's other requests of CPU.
func (s *Server) checkPassword(ctx context.Context, name, password string) (cbdash.User, []byte, error) {
	wait, cancel := context.WithTimeout(ctx, hashWait)
	defer cancel()
	select {
	case s.hashing <- struct{}{}:
		defer func() { <-s.hashing }()
	case <-wait.Done():
		s.metrics.loginRefused.WithLabelValues("busy").Inc()
		return cbdash.User{}, nil, echo.NewHTTPError(http.StatusServiceUnavailable, "too many logins at once; try again in a moment")
	}
	u, hash, err := s.cfg.Sessions.UserByName(ctx, name)
	if errors.Is(err, cbdash.ErrNotFound) {
		_ = bcrypt.CompareHashAndPassword(s.dummy(), []byte(password))
		return cbdash.User{}, nil, errorf(cbdash.ErrUnauthorized, "wrong user name or password")
	}
	if err != nil {
		return cbdash.User{}, nil, err
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil {
		return cbdash.User{}, nil, errorf(cbdash.ErrUnauthorized, "wrong user name or password")
	}
	if u.Disabled { // said only to whoever knows the password
		return cbdash.User{}, nil, errDisabled
	}
	return u, hash, nil
}

func (s *Server) logout(c echo.Context) error {
	if ck, err := c.Cookie(sessionCookie); err == nil && ck.Value != "" {
		if err := s.cfg.Sessions.DeleteSession(c.Request().Context(), ck.Value); err != nil {
			return err
		}
	}
	s.clearSession(c)
	return redirect(c, "/login")
}

func (s *Server) clearSession(c echo.Context) {
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.cfg.Secure, SameSite: http.SameSiteLaxMode})
}

// localPath keeps only local redirect targets: "/..." but not "//...",
// and nothing with a backslash or a control character anywhere, which
// browsers drop or read as a slash ("/\t/host" and "/\\host" are
// "//host" to them).
func localPath(p string) string {
	bad := func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.IndexFunc(p, bad) >= 0 {
		return "/"
	}
	if u, err := url.Parse(p); err != nil || u.Host != "" || u.Scheme != "" {
		return "/"
	}
	return p
}

// HashPassword hashes a password with bcrypt (default cost) for
// CreateUser (Accounts, FirstAccount). Passwords must be 8 to 72 bytes (bcrypt's limit);
// otherwise the error wraps cbdash.ErrInvalid.
func HashPassword(password string) ([]byte, error) {
	return hashPassword(password, bcrypt.DefaultCost)
}

func hashPassword(password string, cost int) ([]byte, error) {
	if len(password) < 8 || len(password) > 72 {
		return nil, errorf(cbdash.ErrInvalid, "password must be 8 to 72 bytes long")
	}
	return bcrypt.GenerateFromPassword([]byte(password), cost)
}

// FirstAccount is what EnsureAdmin needs of the store; *store.Store
// implements it.
type FirstAccount interface {
	CountUsers(ctx context.Context) (int, error)
	CreateUser(ctx context.Context, name, role string, passwordHash []byte) (cbdash.User, error)
}

// EnsureAdmin creates the first account, "admin" with the admin role,
// when the store has no user yet. It uses password when given (for
// example from CBDASH_ADMIN_PASSWORD), otherwise it generates a random
// one and returns it so the caller can print it once. created is false
// (and the password "") when users already exist.
func EnsureAdmin(ctx context.Context, a FirstAccount, password string) (created bool, pw string, err error) {
	n, err := a.CountUsers(ctx)
	if err != nil {
		return false, "", err
	}
	if n > 0 {
		return false, "", nil
	}
	if password == "" {
		password = rand.Text() // 26 characters of A-Z and 2-7, 130 random bits
	}
	hash, err := HashPassword(password)
	if err != nil {
		return false, "", err
	}
	if _, err := a.CreateUser(ctx, AdminName, cbdash.RoleAdmin, hash); err != nil {
		return false, "", err
	}
	return true, password, nil
}
