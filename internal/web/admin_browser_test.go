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

// coveredButtons names the buttons of main that are not the element at
// their own centre and at points 2 px inside their corners once scrolled
// into view ("" when every one is): what a click there would land on
// instead.
const coveredButtons = `(() => [...document.querySelectorAll("main button")].filter(b => b.offsetParent !== null).map(b => {
	b.scrollIntoView({block: "center", inline: "center"});
	const r = b.getBoundingClientRect();
	const points = [[r.left + r.width / 2, r.top + r.height / 2], [r.left + 2, r.top + 2], [r.right - 2, r.top + 2], [r.left + 2, r.bottom - 2], [r.right - 2, r.bottom - 2]];
	const at = points.map(([x, y]) => document.elementFromPoint(x, y)).find(e => !(e === b || b.contains(e)));
	if (at === undefined) return "";
	const row = b.closest("[data-user],[data-ref]");
	return (row ? (row.dataset.user ?? row.dataset.ref) + " " : "") + b.textContent.trim() + " under " + (at ? at.tagName.toLowerCase() + (at.className ? "." + at.className : "") : "nothing");
}).filter(s => s !== "").join(", "))()`

// TestBrowserAdminButtonsAreNotCovered clicks nothing: it asks at each of
// the admin page's buttons (Disable and Delete are its emergency actions)
// which element is at the button's centre, at 1440 and at 390 px, and
// that the page does not scroll sideways on a phone.
func TestBrowserAdminButtonsAreNotCovered(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t, 1)
	bg := t.Context()
	hash, _ := web.HashPassword("admin-password")
	if _, err := s.st.CreateUser(bg, "ada", cbdash.RoleAdmin, hash); err != nil {
		t.Fatal(err)
	}
	otto, _, _ := s.st.UserByName(bg, "otto")
	if _, _, err := s.st.IssueUserToken(bg, "test", otto.ID, "otto's laptop with a long token name", time.Time{}); err != nil {
		t.Fatal(err)
	}
	login(t, ctx, s.url, "ada", "admin-password")
	for _, width := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, "admin page", narrow(width), chromedp.Navigate(s.url+"/admin"),
			chromedp.WaitVisible(css(`[data-user=otto] [data-testid=disable-button]`)))
		n := get(t, ctx, "buttons", chromedp.Evaluate[int](`document.querySelectorAll("main [data-testid=disable-button], main [data-testid=delete-button]").length`))
		if n < 4 {
			t.Fatalf("%d Disable and Delete buttons, want one of each for ada and otto", n)
		}
		if c := get(t, ctx, "covered buttons", chromedp.Evaluate[string](coveredButtons)); c != "" {
			t.Errorf("at %d px buttons are covered: %s", width, c)
		}
		if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
			t.Errorf("the admin page at %d px scrolls sideways: %s", width, o)
		}
		if width == 390 {
			screenshot(t, ctx, "admin-390.png")
		} else {
			screenshot(t, ctx, "admin.png")
		}
	}
}
