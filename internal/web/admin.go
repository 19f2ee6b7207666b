package web

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

func (s *Server) adminPage(c echo.Context) error {
	return s.renderAdmin(c, "", "")
}

// renderAdmin shows the admin page, with a secret just created (once).
func (s *Server) renderAdmin(c echo.Context, label, secret string) error {
	users, err := s.store.Users(c.Request().Context())
	if err != nil {
		return err
	}
	v := templates.Admin{Page: s.page(c, "Admin", "admin"), Secret: secret, SecretLabel: label}
	for _, u := range users {
		v.Users = append(v.Users, templates.UserRow{Name: u.Name, Role: u.Role, Created: stamp(u.CreatedAt)})
	}
	for _, r := range []string{cbdash.RoleViewer, cbdash.RoleOperator, cbdash.RoleAdmin} {
		v.Roles = append(v.Roles, templates.Option{Value: r, Text: r})
	}
	return render(c, http.StatusOK, templates.AdminPage(v))
}

func (s *Server) addUser(c echo.Context) error {
	name, role := strings.TrimSpace(c.FormValue("name")), c.FormValue("role")
	if name == "" || len(name) > 100 {
		return errorf(cbdash.ErrInvalid, "name must be 1 to 100 bytes")
	}
	if !cbdash.ValidRole(role) {
		return errorf(cbdash.ErrInvalid, "role must be viewer, operator or admin")
	}
	hash, err := HashPassword(c.FormValue("password"))
	if err != nil {
		return err
	}
	if _, err := s.store.CreateUser(c.Request().Context(), name, role, hash); err != nil {
		return err
	}
	return redirect(c, "/admin")
}

func (s *Server) addUserToken(c echo.Context) error {
	ctx := c.Request().Context()
	name := strings.TrimSpace(c.FormValue("name"))
	if name == "" || len(name) > 100 {
		return errorf(cbdash.ErrInvalid, "token name must be 1 to 100 bytes")
	}
	u, _, err := s.store.UserByName(ctx, c.FormValue("user"))
	if err != nil {
		return err
	}
	tok, err := s.store.CreateUserToken(ctx, u.ID, name)
	if err != nil {
		return err
	}
	return s.renderAdmin(c, "API token "+name+" for "+u.Name+" (use it as Authorization: Bearer …).", tok)
}

func (s *Server) addAgentToken(c echo.Context) error {
	svc := strings.TrimSpace(c.FormValue("service"))
	tok, err := s.store.CreateAgentToken(c.Request().Context(), svc)
	if err != nil {
		return err
	}
	label := "Agent token for any service."
	if svc != "" {
		label = "Agent token for service " + svc + "."
	}
	return s.renderAdmin(c, label, tok)
}
