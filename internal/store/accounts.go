package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// Token references name tokens in lists, the account log and the CLI:
// "ut-<id>" for a user API token, "at-<id>" for an agent token (see
// AgentToken.ID).
const (
	userTokenRef  = "ut-"
	agentTokenRef = "at-"
)

// UserTokenRef is the reference of user API token id: "ut-12".
func UserTokenRef(id int64) string { return userTokenRef + strconv.FormatInt(id, 10) }

// AgentTokenRef is the reference of agent token id: "at-3f9c0d1e2a4b5c6d".
func AgentTokenRef(id string) string { return agentTokenRef + id }

// ParseTokenRef splits a token reference into its kind and ID: agent is
// true for "at-<16 hex digits>", false for "ut-<number>" (whose number is
// userID). Errors wrap cbdash.ErrInvalid.
func ParseTokenRef(ref string) (agent bool, agentID string, userID int64, err error) {
	ref = strings.ToLower(strings.TrimSpace(ref))
	if id, ok := strings.CutPrefix(ref, agentTokenRef); ok {
		if b, err := hex.DecodeString(id); err != nil || len(b) != 8 {
			return false, "", 0, fmt.Errorf("%w: agent token %q: want at- and 16 hex digits", cbdash.ErrInvalid, ref)
		}
		return true, id, 0, nil
	}
	if id, ok := strings.CutPrefix(ref, userTokenRef); ok {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n <= 0 {
			return false, "", 0, fmt.Errorf("%w: API token %q: want ut- and a number", cbdash.ErrInvalid, ref)
		}
		return false, "", n, nil
	}
	return false, "", 0, fmt.Errorf("%w: token %q: want ut-<n> (API token) or at-<id> (agent token), as `cbdash token list` shows", cbdash.ErrInvalid, ref)
}

// AgentTokenID is the ID (see AgentToken.ID) of an agent token secret:
// the first 8 bytes of its SHA-256 in hex. The collector keys open
// connections by it, so that revoking a token can close them.
func AgentTokenID(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:8])
}

// logEvent appends an account log entry inside x's transaction.
func (x *wtx) logEvent(now int64, actor, action, subject, detail string) error {
	if actor == "" {
		return fmt.Errorf("%w: the account log needs an actor", cbdash.ErrInvalid)
	}
	_, err := x.exec("INSERT INTO account_events (at, actor, action, subject, detail) VALUES ($1, $2, $3, $4, $5)",
		now, actor, action, subject, detail)
	return err
}

// activeAdmins counts the enabled admins other than the user named except.
func (x *wtx) activeAdminsBut(except string) (int, error) {
	row, err := x.queryRow("SELECT count(*) FROM users WHERE role = 'admin' AND disabled_at = 0 AND name <> $1", except)
	if err != nil {
		return 0, err
	}
	var n int
	return n, row.Scan(&n)
}

// userRow reads the ID, role and disabled flag of the user named.
func (x *wtx) userRow(name string) (id int64, role string, disabled bool, err error) {
	row, err := x.queryRow("SELECT id, role, disabled_at FROM users WHERE name = $1", name)
	if err != nil {
		return 0, "", false, err
	}
	var d int64
	if err := row.Scan(&id, &role, &d); err != nil {
		return 0, "", false, fmt.Errorf("%w: user %q", cbdash.ErrNotFound, name)
	}
	return id, role, d != 0, nil
}

// keepAnAdmin refuses a change that would leave no enabled admin.
func (x *wtx) keepAnAdmin(name, role string, disabled bool, what string) error {
	if role != cbdash.RoleAdmin || disabled {
		return nil
	}
	n, err := x.activeAdminsBut(name)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %s would leave no enabled admin (make another admin first)", cbdash.ErrConflict, what)
	}
	return nil
}

// RecordAccountEvent appends an entry to the account log, for changes
// made through methods that do not log themselves (CreateUser,
// SetPassword, CreateUserToken, CreateAgentToken). At zero is now.
// Errors: cbdash.ErrInvalid without actor or action, ErrClosed, ctx's or
// a wrapped driver error.
func (s *Store) RecordAccountEvent(ctx context.Context, ev cbdash.AccountEvent) error {
	if ev.Action == "" {
		return fmt.Errorf("store: account event: %w: action is required", cbdash.ErrInvalid)
	}
	at := ms(ev.At)
	if ev.At.IsZero() {
		at = ms(s.opts.Clock.Now())
	}
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		return x.logEvent(at, ev.Actor, ev.Action, ev.Subject, ev.Detail)
	}})
	if err != nil {
		return fmt.Errorf("store: account event: %w", err)
	}
	return nil
}

// AccountEvents returns the newest limit entries of the account log,
// newest first (limit <= 0 = 100). Errors: ctx's or a wrapped driver
// error.
func (s *Store) AccountEvents(ctx context.Context, limit int) ([]cbdash.AccountEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.rdb.QueryContext(ctx, "SELECT id, at, actor, action, subject, detail FROM account_events ORDER BY id DESC LIMIT $1", limit)
	if err != nil {
		return nil, fmt.Errorf("store: account events: %w", err)
	}
	defer rows.Close()
	var out []cbdash.AccountEvent
	for rows.Next() {
		var e cbdash.AccountEvent
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.Subject, &e.Detail); err != nil {
			return nil, fmt.Errorf("store: account events: %w", err)
		}
		e.At = fromMs(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: account events: %w", err)
	}
	return out, nil
}

// SetUserRole changes a user's role and logs it as actor's. Errors:
// cbdash.ErrInvalid for an unknown role, cbdash.ErrNotFound for an
// unknown user, cbdash.ErrConflict when it would leave no enabled admin,
// ErrClosed, ctx's or a wrapped driver error.
func (s *Store) SetUserRole(ctx context.Context, actor, name, role string) error {
	if !cbdash.ValidRole(role) {
		return fmt.Errorf("store: set role: %w: role %q is not viewer, operator or admin", cbdash.ErrInvalid, role)
	}
	now := ms(s.opts.Clock.Now())
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		_, old, disabled, err := x.userRow(name)
		if err != nil {
			return err
		}
		if old == role {
			return nil
		}
		if err := x.keepAnAdmin(name, old, disabled, "changing the role of "+name); err != nil {
			return err
		}
		if _, err := x.exec("UPDATE users SET role = $1 WHERE name = $2", role, name); err != nil {
			return err
		}
		return x.logEvent(now, actor, cbdash.AccountUserRole, name, old+" > "+role)
	}})
	if err != nil {
		return fmt.Errorf("store: set role: %w", err)
	}
	return nil
}

// SetUserDisabled disables or enables a user and logs it as actor's.
// Disabling ends the user's sessions; from then on its sessions and API
// tokens are refused and it cannot log in (its tokens work again if it is
// enabled again, its sessions do not). Errors: cbdash.ErrNotFound,
// cbdash.ErrConflict when disabling the last enabled admin, ErrClosed,
// ctx's or a wrapped driver error.
func (s *Store) SetUserDisabled(ctx context.Context, actor, name string, disabled bool) error {
	now := ms(s.opts.Clock.Now())
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		id, role, was, err := x.userRow(name)
		if err != nil {
			return err
		}
		if was == disabled {
			return nil
		}
		if !disabled {
			if _, err := x.exec("UPDATE users SET disabled_at = 0 WHERE id = $1", id); err != nil {
				return err
			}
			return x.logEvent(now, actor, cbdash.AccountUserEnable, name, "")
		}
		if err := x.keepAnAdmin(name, role, false, "disabling "+name); err != nil {
			return err
		}
		if _, err := x.exec("UPDATE users SET disabled_at = $1 WHERE id = $2", now, id); err != nil {
			return err
		}
		if _, err := x.exec("DELETE FROM sessions WHERE user_id = $1", id); err != nil {
			return err
		}
		return x.logEvent(now, actor, cbdash.AccountUserDisable, name, "")
	}})
	if err != nil {
		return fmt.Errorf("store: disable user: %w", err)
	}
	return nil
}

// DeleteUser deletes a user with its sessions and API tokens, and logs
// it as actor's (commands it issued keep its name in the audit log).
// Errors: cbdash.ErrNotFound, cbdash.ErrConflict when deleting the last
// enabled admin, ErrClosed, ctx's or a wrapped driver error.
func (s *Store) DeleteUser(ctx context.Context, actor, name string) error {
	now := ms(s.opts.Clock.Now())
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		id, role, disabled, err := x.userRow(name)
		if err != nil {
			return err
		}
		if err := x.keepAnAdmin(name, role, disabled, "deleting "+name); err != nil {
			return err
		}
		// Explicit rather than by ON DELETE CASCADE, which a connection
		// without foreign_keys would skip.
		for _, q := range []string{"DELETE FROM sessions WHERE user_id = $1", "DELETE FROM user_tokens WHERE user_id = $1", "DELETE FROM users WHERE id = $1"} {
			if _, err := x.exec(q, id); err != nil {
				return err
			}
		}
		return x.logEvent(now, actor, cbdash.AccountUserDelete, name, role)
	}})
	if err != nil {
		return fmt.Errorf("store: delete user: %w", err)
	}
	return nil
}

// AllUserTokens lists every user API token (without its secret), by user
// name, then ID. Errors: ctx's or a wrapped driver error.
func (s *Store) AllUserTokens(ctx context.Context) ([]cbdash.APIToken, error) {
	return s.userTokens(ctx, "")
}

func (s *Store) userTokens(ctx context.Context, where string, args ...any) ([]cbdash.APIToken, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT t.id, t.user_id, u.name, t.name, t.created_at, t.last_used, t.expires_at
		FROM user_tokens t JOIN users u ON u.id = t.user_id `+where+` ORDER BY u.name, t.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: user tokens: %w", err)
	}
	defer rows.Close()
	var out []cbdash.APIToken
	for rows.Next() {
		var t cbdash.APIToken
		var created, used, expires int64
		if err := rows.Scan(&t.ID, &t.UserID, &t.User, &t.Name, &created, &used, &expires); err != nil {
			return nil, fmt.Errorf("store: user tokens: %w", err)
		}
		t.CreatedAt, t.LastUsed, t.ExpiresAt = fromMs(created), fromMs(used), fromMs(expires)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: user tokens: %w", err)
	}
	return out, nil
}

// RevokeUserToken deletes user API token id and logs it as actor's; it
// is refused from the next request on. Errors: cbdash.ErrNotFound,
// ErrClosed, ctx's or a wrapped driver error.
func (s *Store) RevokeUserToken(ctx context.Context, actor string, id int64) error {
	now := ms(s.opts.Clock.Now())
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		row, err := x.queryRow("SELECT u.name, t.name FROM user_tokens t JOIN users u ON u.id = t.user_id WHERE t.id = $1", id)
		if err != nil {
			return err
		}
		var user, name string
		if err := row.Scan(&user, &name); err != nil {
			return fmt.Errorf("%w: API token %s", cbdash.ErrNotFound, UserTokenRef(id))
		}
		if _, err := x.exec("DELETE FROM user_tokens WHERE id = $1", id); err != nil {
			return err
		}
		return x.logEvent(now, actor, cbdash.AccountTokenRevoke, UserTokenRef(id), fmt.Sprintf("%s of %s", name, user))
	}})
	if err != nil {
		return fmt.Errorf("store: revoke API token: %w", err)
	}
	return nil
}

// RevokeUserTokens deletes every API token of the user named, logs it as
// actor's and returns how many there were. Errors: cbdash.ErrNotFound,
// ErrClosed, ctx's or a wrapped driver error.
func (s *Store) RevokeUserTokens(ctx context.Context, actor, name string) (int, error) {
	now := ms(s.opts.Clock.Now())
	var n int64
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		id, _, _, err := x.userRow(name)
		if err != nil {
			return err
		}
		res, err := x.exec("DELETE FROM user_tokens WHERE user_id = $1", id)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return x.logEvent(now, actor, cbdash.AccountUserTokensEnded, name, fmt.Sprintf("%d tokens", n))
	}})
	if err != nil {
		return 0, fmt.Errorf("store: revoke API tokens: %w", err)
	}
	return int(n), nil
}

// ExpireUserToken sets when user API token id stops working (at or
// before now: at once; zero: never) and logs it as actor's. Errors:
// cbdash.ErrNotFound, ErrClosed, ctx's or a wrapped driver error.
func (s *Store) ExpireUserToken(ctx context.Context, actor string, id int64, at time.Time) error {
	now := ms(s.opts.Clock.Now())
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec("UPDATE user_tokens SET expires_at = $1 WHERE id = $2", ms(at), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%w: API token %s", cbdash.ErrNotFound, UserTokenRef(id))
		}
		return x.logEvent(now, actor, cbdash.AccountTokenExpire, UserTokenRef(id), expiryText(at))
	}})
	if err != nil {
		return fmt.Errorf("store: expire API token: %w", err)
	}
	return nil
}

// RevokeAgentToken deletes the agent token with the given ID (see
// AgentToken.ID) and logs it as actor's. New connections and ingests with
// it are refused at once; the collector closes the open ones
// (collector.Collector.RevokeAgentToken does both). Errors:
// cbdash.ErrNotFound, ErrClosed, ctx's or a wrapped driver error.
func (s *Store) RevokeAgentToken(ctx context.Context, actor, id string) error {
	now := ms(s.opts.Clock.Now())
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		row, err := x.queryRow("SELECT service FROM agent_tokens WHERE "+x.w.d.agentTokenID()+" = lower($1)", id)
		if err != nil {
			return err
		}
		var svc string
		if err := row.Scan(&svc); err != nil {
			return fmt.Errorf("%w: agent token %q", cbdash.ErrNotFound, id)
		}
		if _, err := x.exec("DELETE FROM agent_tokens WHERE "+x.w.d.agentTokenID()+" = lower($1)", id); err != nil {
			return err
		}
		return x.logEvent(now, actor, cbdash.AccountAgentRevoke, AgentTokenRef(strings.ToLower(id)), serviceText(svc))
	}})
	if err != nil {
		return fmt.Errorf("store: revoke agent token: %w", err)
	}
	return nil
}

// ExpireAgentToken sets when agent token id stops working (at or before
// now: at once; zero: never) and logs it as actor's. Errors:
// cbdash.ErrNotFound, ErrClosed, ctx's or a wrapped driver error.
func (s *Store) ExpireAgentToken(ctx context.Context, actor, id string, at time.Time) error {
	now := ms(s.opts.Clock.Now())
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		res, err := x.exec("UPDATE agent_tokens SET expires_at = $1 WHERE "+x.w.d.agentTokenID()+" = lower($2)", ms(at), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%w: agent token %q", cbdash.ErrNotFound, id)
		}
		return x.logEvent(now, actor, cbdash.AccountAgentExpire, AgentTokenRef(strings.ToLower(id)), expiryText(at))
	}})
	if err != nil {
		return fmt.Errorf("store: expire agent token: %w", err)
	}
	return nil
}

// LiveAgentTokens returns which of the agent token IDs are still valid
// at now (not revoked, not expired), for the collector to close the
// connections of the others. Errors: ctx's or a wrapped driver error.
func (s *Store) LiveAgentTokens(ctx context.Context, ids []string, now time.Time) (map[string]bool, error) {
	vals := make([]any, len(ids))
	for i, id := range ids {
		vals[i] = strings.ToLower(id)
	}
	d := s.rdb.d
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+d.agentTokenID()+` FROM agent_tokens
		WHERE `+d.agentTokenID()+` IN (SELECT value FROM `+d.jsonEach("$1")+`) AND (expires_at = 0 OR expires_at > $2)`,
		jsonStrings(vals), ms(now))
	if err != nil {
		return nil, fmt.Errorf("store: live agent tokens: %w", err)
	}
	defer rows.Close()
	out := make(map[string]bool, len(ids))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: live agent tokens: %w", err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: live agent tokens: %w", err)
	}
	return out, nil
}

func expiryText(at time.Time) string {
	if at.IsZero() {
		return "never expires"
	}
	return "expires " + at.UTC().Format(time.RFC3339)
}

func serviceText(svc string) string {
	if svc == "" {
		return "any service"
	}
	return "service " + svc
}

// IssueUserToken creates an API token acting as the user, valid until
// expires (zero: no expiry), logs it as actor's, and returns the secret
// (shown once) and the token's reference ("ut-12"). Errors: as
// CreateUserToken, and cbdash.ErrInvalid without actor.
func (s *Store) IssueUserToken(ctx context.Context, actor string, userID int64, name string, expires time.Time) (token, ref string, err error) {
	if strings.TrimSpace(name) == "" || len(name) > 100 {
		return "", "", fmt.Errorf("%w: token name must be 1 to 100 bytes", cbdash.ErrInvalid)
	}
	tok, err := newSecret(userTokenPrefix)
	if err != nil {
		return "", "", err
	}
	now := ms(s.opts.Clock.Now())
	err = s.w.do(ctx, &op{run: func(x *wtx) error {
		row, err := x.queryRow("SELECT name FROM users WHERE id = $1", userID)
		if err != nil {
			return err
		}
		var user string
		if err := row.Scan(&user); err != nil {
			return fmt.Errorf("%w: user %d", cbdash.ErrNotFound, userID)
		}
		id, err := x.insertID("INSERT INTO user_tokens (hash, user_id, name, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)",
			hashToken(tok), userID, name, now, ms(expires))
		if err != nil {
			return err
		}
		ref = UserTokenRef(id)
		return x.logEvent(now, actor, cbdash.AccountTokenCreate, ref, fmt.Sprintf("%s for %s, %s", name, user, expiryText(expires)))
	}})
	if err != nil {
		return "", "", fmt.Errorf("store: create user token: %w", err)
	}
	return tok, ref, nil
}

// IssueAgentToken creates an agent token limited to service ("" = any),
// valid until expires (zero: no expiry), logs it as actor's, and returns
// the secret (shown once) and the token's reference ("at-..."). Errors:
// cbdash.ErrInvalid without actor, ErrClosed, ctx's or a wrapped driver
// error.
func (s *Store) IssueAgentToken(ctx context.Context, actor, service string, expires time.Time) (token, ref string, err error) {
	tok, err := newSecret(agentTokenPrefix)
	if err != nil {
		return "", "", err
	}
	ref = AgentTokenRef(AgentTokenID(tok))
	now := ms(s.opts.Clock.Now())
	err = s.w.do(ctx, &op{run: func(x *wtx) error {
		if _, err := x.exec("INSERT INTO agent_tokens (hash, service, created_at, expires_at) VALUES ($1, $2, $3, $4)",
			hashToken(tok), service, now, ms(expires)); err != nil {
			return err
		}
		return x.logEvent(now, actor, cbdash.AccountAgentToken, ref, serviceText(service)+", "+expiryText(expires))
	}})
	if err != nil {
		return "", "", fmt.Errorf("store: create agent token: %w", err)
	}
	return tok, ref, nil
}
