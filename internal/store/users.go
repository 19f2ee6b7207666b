package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// Prefixes of the secrets handed to dashboard users, so a leaked one is
// easy to recognise.
const (
	sessionPrefix   = "cbdash_s_"
	userTokenPrefix = "cbdash_ut_"
)

// newSecret returns prefix and 26 characters of base32 (A-Z, 2-7): 130
// random bits from crypto/rand.Text, which no dictionary or brute force
// reaches, so an unsalted SHA-256 of it is enough to store. Secrets made
// before (prefix and 43 characters of base64url, 256 bits) still verify:
// only their hash is looked up, never their shape. The error is always nil
// (crypto/rand never fails since Go 1.24); it stays for the callers.
func newSecret(prefix string) (string, error) {
	return prefix + rand.Text(), nil
}

// CountUsers returns the number of dashboard accounts.
func (s *Store) CountUsers(ctx context.Context) (int, error) {
	var n int
	if err := s.rdb.QueryRowContext(ctx, "SELECT count(*) FROM users").Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count users: %w", err)
	}
	return n, nil
}

// CreateUser stores an account with a password hash made by the caller
// (bcrypt, in the web package). Errors: cbdash.ErrInvalid for an empty or
// over-long name, an unknown role or an empty hash; cbdash.ErrConflict
// when the name is taken; ErrClosed, ctx's or a wrapped driver error.
func (s *Store) CreateUser(ctx context.Context, name, role string, passwordHash []byte) (cbdash.User, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "" || len(name) > 100:
		return cbdash.User{}, fmt.Errorf("%w: user name must be 1 to 100 bytes", cbdash.ErrInvalid)
	case !cbdash.ValidRole(role):
		return cbdash.User{}, fmt.Errorf("%w: role %q is not viewer, operator or admin", cbdash.ErrInvalid, role)
	case len(passwordHash) == 0:
		return cbdash.User{}, fmt.Errorf("%w: password hash is required", cbdash.ErrInvalid)
	}
	u := cbdash.User{Name: name, Role: role, CreatedAt: fromMs(ms(s.opts.Clock.Now()))}
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		row, err := x.queryRow("SELECT count(*) FROM users WHERE name = $1", name)
		if err != nil {
			return err
		}
		var n int
		if err := row.Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: user %q exists", cbdash.ErrConflict, name)
		}
		u.ID, err = x.insertID("INSERT INTO users (name, role, password_hash, created_at) VALUES ($1, $2, $3, $4)",
			name, role, passwordHash, ms(u.CreatedAt))
		return err
	}})
	if err != nil {
		return cbdash.User{}, fmt.Errorf("store: create user: %w", err)
	}
	return u, nil
}

// SetPassword replaces a user's password hash and ends the user's
// sessions, so a leaked password stops working at once. Errors:
// cbdash.ErrInvalid for an empty hash, cbdash.ErrNotFound for an unknown
// user, ErrClosed, ctx's or a wrapped driver error.
func (s *Store) SetPassword(ctx context.Context, name string, passwordHash []byte) error {
	if len(passwordHash) == 0 {
		return fmt.Errorf("store: set password: %w: password hash is required", cbdash.ErrInvalid)
	}
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec("UPDATE users SET password_hash = $1 WHERE name = $2", passwordHash, strings.TrimSpace(name))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("user %q: %w", name, cbdash.ErrNotFound)
		}
		_, err = x.exec("DELETE FROM sessions WHERE user_id = (SELECT id FROM users WHERE name = $1)", strings.TrimSpace(name))
		return err
	}})
	if err != nil {
		return fmt.Errorf("store: set password: %w", err)
	}
	return nil
}

// UserByName returns an account (disabled or not: see User.Disabled) and
// its password hash. Errors:
// cbdash.ErrNotFound for an unknown name, ctx's or a wrapped driver error.
func (s *Store) UserByName(ctx context.Context, name string) (cbdash.User, []byte, error) {
	var u cbdash.User
	var hash []byte
	var created, disabled int64
	err := s.rdb.QueryRowContext(ctx, "SELECT id, name, role, password_hash, created_at, disabled_at FROM users WHERE name = $1", name).
		Scan(&u.ID, &u.Name, &u.Role, &hash, &created, &disabled)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return u, nil, fmt.Errorf("%w: user %q", cbdash.ErrNotFound, name)
	case err != nil:
		return u, nil, fmt.Errorf("store: user: %w", err)
	}
	u.CreatedAt, u.Disabled = fromMs(created), disabled != 0
	return u, hash, nil
}

// Users lists every account by name.
func (s *Store) Users(ctx context.Context) ([]cbdash.User, error) {
	rows, err := s.rdb.QueryContext(ctx, "SELECT id, name, role, created_at, disabled_at FROM users ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("store: users: %w", err)
	}
	defer rows.Close()
	var out []cbdash.User
	for rows.Next() {
		var u cbdash.User
		var created, disabled int64
		if err := rows.Scan(&u.ID, &u.Name, &u.Role, &created, &disabled); err != nil {
			return nil, fmt.Errorf("store: users: %w", err)
		}
		u.CreatedAt, u.Disabled = fromMs(created), disabled != 0
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: users: %w", err)
	}
	return out, nil
}

// CreateSession starts a login session for a user until expires and
// returns its secret (the cookie value); only its SHA-256 is stored.
// Expired sessions are deleted on the way. Errors: cbdash.ErrNotFound for
// an unknown or disabled user, ErrClosed, ctx's or a wrapped driver error.
func (s *Store) CreateSession(ctx context.Context, userID int64, expires time.Time) (string, error) {
	tok, err := newSecret(sessionPrefix)
	if err != nil {
		return "", err
	}
	now := ms(s.opts.Clock.Now())
	err = s.w.do(ctx, &op{run: func(x *wtx) error {
		if _, err := x.exec("DELETE FROM sessions WHERE expires_at <= $1", now); err != nil {
			return err
		}
		row, err := x.queryRow("SELECT count(*) FROM users WHERE id = $1 AND disabled_at = 0", userID)
		if err != nil {
			return err
		}
		var n int
		if err := row.Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: user %d (or the account is disabled)", cbdash.ErrNotFound, userID)
		}
		_, err = x.exec("INSERT INTO sessions (hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
			hashToken(tok), userID, now, ms(expires))
		return err
	}})
	if err != nil {
		return "", fmt.Errorf("store: create session: %w", err)
	}
	return tok, nil
}

// SessionUser returns the user of an unexpired session at now. Errors:
// cbdash.ErrUnauthorized for an unknown or expired session or a disabled
// user, ctx's or a wrapped driver error.
func (s *Store) SessionUser(ctx context.Context, token string, now time.Time) (cbdash.User, error) {
	var u cbdash.User
	var created int64
	err := s.rdb.QueryRowContext(ctx, `SELECT u.id, u.name, u.role, u.created_at FROM sessions s JOIN users u ON u.id = s.user_id
		WHERE s.hash = $1 AND s.expires_at > $2 AND u.disabled_at = 0`, hashToken(token), ms(now)).Scan(&u.ID, &u.Name, &u.Role, &created)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return u, fmt.Errorf("%w: unknown or expired session", cbdash.ErrUnauthorized)
	case err != nil:
		return u, fmt.Errorf("store: session: %w", err)
	}
	u.CreatedAt = fromMs(created)
	return u, nil
}

// DeleteSession ends a session (logout); an unknown one is not an error.
func (s *Store) DeleteSession(ctx context.Context, token string) error {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		_, err := x.exec("DELETE FROM sessions WHERE hash = $1", hashToken(token))
		return err
	}})
	if err != nil {
		return fmt.Errorf("store: delete session: %w", err)
	}
	return nil
}

// CreateUserToken creates an API token acting as the user (for the CLI's
// Authorization: Bearer) and returns it once; only its SHA-256 is
// stored. Errors: cbdash.ErrInvalid for an empty name, cbdash.ErrNotFound
// for an unknown user, ErrClosed, ctx's or a wrapped driver error.
func (s *Store) CreateUserToken(ctx context.Context, userID int64, name string) (string, error) {
	if strings.TrimSpace(name) == "" || len(name) > 100 {
		return "", fmt.Errorf("%w: token name must be 1 to 100 bytes", cbdash.ErrInvalid)
	}
	tok, err := newSecret(userTokenPrefix)
	if err != nil {
		return "", err
	}
	now := ms(s.opts.Clock.Now())
	err = s.w.do(ctx, &op{run: func(x *wtx) error {
		row, err := x.queryRow("SELECT count(*) FROM users WHERE id = $1", userID)
		if err != nil {
			return err
		}
		var n int
		if err := row.Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: user %d", cbdash.ErrNotFound, userID)
		}
		_, err = x.exec("INSERT INTO user_tokens (hash, user_id, name, created_at) VALUES ($1, $2, $3, $4)",
			hashToken(tok), userID, name, now)
		return err
	}})
	if err != nil {
		return "", fmt.Errorf("store: create user token: %w", err)
	}
	return tok, nil
}

// UserByToken returns the user an API token acts as; its last-used time
// is recorded in the background at most once a minute. Errors:
// cbdash.ErrUnauthorized for an unknown, revoked or expired token or a
// disabled user, ctx's or a wrapped driver error.
func (s *Store) UserByToken(ctx context.Context, token string) (cbdash.User, error) {
	h := hashToken(token)
	var u cbdash.User
	var created, lastUsed int64
	now := ms(s.opts.Clock.Now())
	err := s.rdb.QueryRowContext(ctx, `SELECT u.id, u.name, u.role, u.created_at, t.last_used FROM user_tokens t
		JOIN users u ON u.id = t.user_id WHERE t.hash = $1 AND u.disabled_at = 0 AND (t.expires_at = 0 OR t.expires_at > $2)`,
		h, now).Scan(&u.ID, &u.Name, &u.Role, &created, &lastUsed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return u, fmt.Errorf("%w: unknown, revoked or expired API token", cbdash.ErrUnauthorized)
	case err != nil:
		return u, fmt.Errorf("store: user token: %w", err)
	}
	u.CreatedAt = fromMs(created)
	if now-lastUsed >= tokenTouchEvery.Milliseconds() {
		s.w.try(&op{run: func(x *wtx) error {
			_, err := x.exec("UPDATE user_tokens SET last_used = "+x.w.d.greatest("last_used", "$1")+" WHERE hash = $2", now, h)
			return err
		}})
	}
	return u, nil
}

// UserTokens lists a user's API tokens (without their secrets).
func (s *Store) UserTokens(ctx context.Context, userID int64) ([]cbdash.APIToken, error) {
	return s.userTokens(ctx, "WHERE t.user_id = $1", userID)
}
