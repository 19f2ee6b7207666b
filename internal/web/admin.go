package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/web/templates"
)

func (s *Server) adminPage(c echo.Context) error {
	return s.renderAdmin(c, adminResult{notice: c.QueryParam("done")})
}

// adminResult is what the admin page shows after an action: a secret
// just created (once) and a notice.
type adminResult struct {
	label, secret, notice string
}

// renderAdmin shows the admin page.
func (s *Server) renderAdmin(c echo.Context, r adminResult) error {
	ctx := c.Request().Context()
	users, err := s.cfg.Accounts.Users(ctx)
	if err != nil {
		return err
	}
	apiTokens, err := s.cfg.Accounts.AllUserTokens(ctx)
	if err != nil {
		return err
	}
	agentTokens, err := s.cfg.Accounts.AgentTokens(ctx)
	if err != nil {
		return err
	}
	events, err := s.cfg.Accounts.AccountEvents(ctx, 50)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, templates.AdminPage(adminView(s.page(c, "Admin", "admin"), r, users, apiTokens, agentTokens, events, s.now())))
}

// adminView builds the admin page's view model.
func adminView(p templates.Page, r adminResult, users []cbdash.User, apiTokens []cbdash.APIToken, agentTokens []store.AgentToken, events []cbdash.AccountEvent, now time.Time) templates.Admin {
	v := templates.Admin{Page: p, Secret: r.secret, SecretLabel: r.label, Notice: r.notice}
	roles := []string{cbdash.RoleViewer, cbdash.RoleOperator, cbdash.RoleAdmin}
	for _, r := range roles {
		v.Roles = append(v.Roles, templates.Option{Value: r, Text: r})
	}
	for _, u := range users {
		row := templates.UserRow{Name: u.Name, Role: u.Role, Created: stamp(u.CreatedAt), Disabled: u.Disabled}
		for _, r := range roles {
			row.Roles = append(row.Roles, templates.Option{Value: r, Text: r, Selected: r == u.Role})
		}
		v.Users = append(v.Users, row)
	}
	for _, t := range apiTokens {
		v.APITokens = append(v.APITokens, templates.TokenRow{
			Ref: store.UserTokenRef(t.ID), Owner: t.User, Name: t.Name, Created: stamp(t.CreatedAt),
			LastUsed: orNever(t.LastUsed), Expires: orNever(t.ExpiresAt), Expired: expired(t.ExpiresAt, now),
		})
	}
	for _, t := range agentTokens {
		owner := t.Service
		if owner == "" {
			owner = "any service"
		}
		v.AgentTokens = append(v.AgentTokens, templates.TokenRow{
			Ref: store.AgentTokenRef(t.ID), Owner: owner, Created: stamp(t.CreatedAt),
			LastUsed: orNever(t.LastUsed), Expires: orNever(t.ExpiresAt), Expired: expired(t.ExpiresAt, now),
		})
	}
	for _, e := range events {
		v.Events = append(v.Events, templates.AccountEventRow{At: stamp(e.At), Actor: e.Actor, Action: e.Action, Subject: e.Subject, Detail: e.Detail})
	}
	return v
}

func orNever(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return stamp(t)
}

func expired(at, now time.Time) bool { return !at.IsZero() && !at.After(now) }

// actorOf is the admin acting, for the account log.
func actorOf(c echo.Context) string { return actorFrom(c).Name }

// done redirects to the admin page with a notice (POST, redirect, GET).
func done(c echo.Context, format string, args ...any) error {
	return redirect(c, "/admin?done="+url.QueryEscape(fmt.Sprintf(format, args...)))
}

func (s *Server) addUser(c echo.Context) error {
	name, role := strings.TrimSpace(c.FormValue("name")), c.FormValue("role")
	if name == "" || len(name) > 100 {
		return errorf(cbdash.ErrInvalid, "name must be 1 to 100 bytes")
	}
	if !cbdash.ValidRole(role) {
		return errorf(cbdash.ErrInvalid, "role must be viewer, operator or admin")
	}
	hash, err := hashPassword(c.FormValue("password"), s.cfg.PasswordCost)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if _, err := s.cfg.Accounts.CreateUser(ctx, name, role, hash); err != nil {
		return err
	}
	if err := s.cfg.Accounts.RecordAccountEvent(ctx, cbdash.AccountEvent{Actor: actorOf(c), Action: cbdash.AccountUserAdd, Subject: name, Detail: role}); err != nil {
		return err
	}
	return redirect(c, "/admin")
}

// expiryFrom reads the optional "days" field: zero time for none.
func (s *Server) expiryFrom(c echo.Context) (time.Time, error) {
	v := strings.TrimSpace(c.FormValue("days"))
	if v == "" {
		return time.Time{}, nil
	}
	d, err := strconv.Atoi(v)
	if err != nil || d < 1 || d > 3650 {
		return time.Time{}, errorf(cbdash.ErrInvalid, "days must be a whole number from 1 to 3650, or empty for a token that does not expire")
	}
	return s.now().Add(time.Duration(d) * 24 * time.Hour), nil
}

func (s *Server) addUserToken(c echo.Context) error {
	ctx := c.Request().Context()
	name := strings.TrimSpace(c.FormValue("name"))
	if name == "" || len(name) > 100 {
		return errorf(cbdash.ErrInvalid, "token name must be 1 to 100 bytes")
	}
	until, err := s.expiryFrom(c)
	if err != nil {
		return err
	}
	u, _, err := s.cfg.Accounts.UserByName(ctx, c.FormValue("user"))
	if err != nil {
		return err
	}
	tok, ref, err := s.cfg.Accounts.IssueUserToken(ctx, actorOf(c), u.ID, name, until)
	if err != nil {
		return err
	}
	return s.renderAdmin(c, adminResult{label: "API token " + ref + " (" + name + ") for " + u.Name + " (use it as Authorization: Bearer …).", secret: tok})
}

func (s *Server) addAgentToken(c echo.Context) error {
	svc := strings.TrimSpace(c.FormValue("service"))
	until, err := s.expiryFrom(c)
	if err != nil {
		return err
	}
	tok, ref, err := s.cfg.Accounts.IssueAgentToken(c.Request().Context(), actorOf(c), svc, until)
	if err != nil {
		return err
	}
	label := "Agent token " + ref + " for any service."
	if svc != "" {
		label = "Agent token " + ref + " for service " + svc + "."
	}
	return s.renderAdmin(c, adminResult{label: label, secret: tok})
}

func (s *Server) setRole(c echo.Context) error {
	name, role := c.FormValue("name"), c.FormValue("role")
	if err := s.cfg.Accounts.SetUserRole(c.Request().Context(), actorOf(c), name, role); err != nil {
		return err
	}
	return done(c, "%s is now %s.", name, role)
}

func (s *Server) disableUser(c echo.Context) error {
	name := c.FormValue("name")
	if err := s.cfg.Accounts.SetUserDisabled(c.Request().Context(), actorOf(c), name, true); err != nil {
		return err
	}
	return done(c, "%s is disabled: its sessions ended and its API tokens are refused.", name)
}

func (s *Server) enableUser(c echo.Context) error {
	name := c.FormValue("name")
	if err := s.cfg.Accounts.SetUserDisabled(c.Request().Context(), actorOf(c), name, false); err != nil {
		return err
	}
	return done(c, "%s is enabled again.", name)
}

func (s *Server) deleteUser(c echo.Context) error {
	name := c.FormValue("name")
	if err := s.cfg.Accounts.DeleteUser(c.Request().Context(), actorOf(c), name); err != nil {
		return err
	}
	return done(c, "%s is deleted, with its sessions and API tokens.", name)
}

// revokeToken revokes a user API token ("ut-12") or an agent token
// ("at-..."); an agent token's open connections are closed at once.
func (s *Server) revokeToken(c echo.Context) error {
	ctx := c.Request().Context()
	ref := c.FormValue("ref")
	agent, agentID, userID, err := store.ParseTokenRef(ref)
	if err != nil {
		return err
	}
	if !agent {
		if err := s.cfg.Accounts.RevokeUserToken(ctx, actorOf(c), userID); err != nil {
			return err
		}
		return done(c, "API token %s is revoked.", store.UserTokenRef(userID))
	}
	if r := s.cfg.AgentSessions; r != nil {
		n, err := r.RevokeAgentToken(ctx, actorOf(c), agentID)
		if err != nil {
			return err
		}
		return done(c, "Agent token %s is revoked; %d open connections closed.", store.AgentTokenRef(agentID), n)
	}
	if err := s.cfg.Accounts.RevokeAgentToken(ctx, actorOf(c), agentID); err != nil {
		return err
	}
	return done(c, "Agent token %s is revoked.", store.AgentTokenRef(agentID))
}

// expireToken sets when a user API token ("ut-12") or an agent token
// ("at-...") stops working: in "days" days from now, or never when days
// is empty. An agent token's open connections are closed once it has
// expired (the collector's sweep).
func (s *Server) expireToken(c echo.Context) error {
	ctx := c.Request().Context()
	ref := c.FormValue("ref")
	agent, agentID, userID, err := store.ParseTokenRef(ref)
	if err != nil {
		return err
	}
	until, err := s.expiryFrom(c)
	if err != nil {
		return err
	}
	if agent {
		err = s.cfg.Accounts.ExpireAgentToken(ctx, actorOf(c), agentID, until)
	} else {
		err = s.cfg.Accounts.ExpireUserToken(ctx, actorOf(c), userID, until)
	}
	if err != nil {
		return err
	}
	if until.IsZero() {
		return done(c, "%s does not expire.", ref)
	}
	return done(c, "%s expires %s UTC.", ref, until.UTC().Format(time.DateTime))
}
