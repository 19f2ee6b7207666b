package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
)

// userRow is a JavaScript expression for the admin page's row of user name.
func userRow(name string) string {
	return `[...document.querySelectorAll("[data-testid=user-row]")].find(r => r.dataset.user === "` + name + `")`
}

func TestBrowserAdminRevokesATokenDisablesAUserAndChangesARole(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 1)
	bg := t.Context()
	hash, _ := web.HashPassword("admin-password")
	if _, err := s.st.CreateUser(bg, "ada", cbdash.RoleAdmin, hash); err != nil {
		t.Fatal(err)
	}
	otto, _, _ := s.st.UserByName(bg, "otto")
	tok, ref, err := s.st.IssueUserToken(bg, "test", otto.ID, "otto's laptop", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	login(t, ctx, s.url, "ada", "admin-password")
	run(t, ctx, stepTimeout, "admin page lists the token and the agent token",
		chromedp.Navigate(s.url+"/admin"),
		chromedp.WaitVisible(css(`[data-testid=api-tokens] [data-ref="`+ref+`"]`)),
		chromedp.WaitVisible(css(`[data-testid=agent-tokens] [data-testid=token-row]`)),
	)

	run(t, ctx, stepTimeout, "revoke the API token",
		chromedp.Click(css(`[data-ref="`+ref+`"] [data-testid=revoke-button]`)),
		chromedp.WaitVisible(css(`[data-testid=notice]`)),
		until(`!document.querySelector('[data-ref="`+ref+`"]')`),
	)
	if _, err := s.st.UserByToken(bg, tok); err == nil {
		t.Error("the token revoked on the admin page still works")
	}

	run(t, ctx, stepTimeout, "disable otto",
		chromedp.Click(css(`[data-user=otto] [data-testid=disable-button]`)),
		chromedp.WaitVisible(css(`[data-user=otto] [data-testid=enable-button]`)),
		until(userRow("otto")+`?.querySelector("[data-testid=user-status]").textContent.trim() === "disabled"`),
	)
	if u, _, err := s.st.UserByName(bg, "otto"); err != nil || !u.Disabled {
		t.Errorf("otto after Disable: %+v %v", u, err)
	}

	run(t, ctx, stepTimeout, "make otto a viewer",
		chromedp.SetValue(css(`[data-user=otto] [data-testid=role-select]`), "viewer"),
		chromedp.Click(css(`[data-user=otto] [data-testid=role-button]`)),
		chromedp.WaitReady(css(`[data-user=otto] option[value=viewer][selected]`)),
	)
	if u, _, _ := s.st.UserByName(bg, "otto"); u.Role != cbdash.RoleViewer {
		t.Errorf("otto's role after the change: %q, want viewer", u.Role)
	}
	log := get(t, ctx, "account log", chromedp.Text(css(`[data-testid=account-log]`)))
	for _, want := range []string{"token revoke", "user disable", "user role", "operator > viewer", ref} {
		if !strings.Contains(log, want) {
			t.Errorf("account log lacks %q:\n%s", want, log)
		}
	}
	screenshot(t, ctx, "admin.png")
}
