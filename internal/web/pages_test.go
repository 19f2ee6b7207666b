package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/web"
)

func TestOverviewShowsEveryDependencyAsText(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{},
		dep("checkout", "payments", 6, 2),
		dep("'; DROP TABLE x;--", "<script>alert(1)</script>", 1, 0)) // a service name has no slash
	res := h.login("vera").get("/")
	if res.status != http.StatusOK {
		t.Fatalf("GET / = %d", res.status)
	}
	for _, want := range []string{
		"open on 2 of 6", `data-state="open"`, "checkout", "payments",
		"&lt;script&gt;alert(1)&lt;/script&gt;", "&#39;; DROP TABLE x;--",
		// aggregated by the collector from what the instances reported
		// (see harness.report): 6 x 40 calls in the last second, p99 within
		// the 250-500 ms bucket, the trip's rate for the open dependency
		// and the sliding window's for the closed one.
		"240.0/s", "490 ms", "55% of 50%", `data-testid="opens">2`, "3% of 50%",
	} {
		if !strings.Contains(res.body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if strings.Contains(res.body, "<script>alert(1)") {
		t.Error("a breaker name was rendered as markup")
	}
}

func TestOverviewFiltersAndSortsWorstFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{},
		dep("a-svc", "calm", 2, 0), dep("b-svc", "burning", 3, 3), dep("c-svc", "other", 1, 0))
	c := h.login("vera")
	body := c.get("/").body
	if i, j := strings.Index(body, "burning"), strings.Index(body, "calm"); i < 0 || j < 0 || i > j {
		t.Errorf("open dependency not first (burning at %d, calm at %d)", i, j)
	}
	for _, tc := range []struct {
		query        string
		want, absent []string
	}{
		{"?state=open", []string{"burning"}, []string{"calm", "other"}},
		{"?service=c-svc", []string{"other"}, []string{"calm", "burning"}},
		{"?q=CAL", []string{"calm"}, []string{"burning", "other"}},
		{"?label=team%3Dpay", []string{"calm", "burning", "other"}, nil},
		{"?label=team%3Dnone", nil, []string{"calm", "burning", "other"}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			body := c.get("/" + tc.query).body
			tiles := body[strings.Index(body, `id="groups"`):]
			for _, w := range tc.want {
				if !strings.Contains(tiles, w) {
					t.Errorf("lacks %q", w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(tiles, ">"+a+"<") {
					t.Errorf("shows %q", a)
				}
			}
		})
	}
}

func TestPagesPerRole(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 3, 0))
	depPath := "/dependency?service=checkout&breaker=payments"
	for _, tc := range []struct {
		user   string
		path   string
		status int
		has    string
	}{
		{"", "/", http.StatusSeeOther, ""},
		{"", depPath, http.StatusSeeOther, ""},
		{"vera", "/", http.StatusOK, "fleet"},
		{"vera", depPath, http.StatusOK, "Request rate by outcome"},
		{"vera", "/timeline", http.StatusOK, "Timeline"},
		{"vera", "/audit", http.StatusOK, "Audit log"},
		{"vera", "/admin", http.StatusForbidden, "admin role"},
		{"otto", depPath, http.StatusOK, `data-testid="operator-form"`},
		{"ada", "/admin", http.StatusOK, "Add a user"},
		{"vera", "/dependency?service=checkout&breaker=nope", http.StatusNotFound, "not found"},
		{"vera", "/dependency?service=checkout", http.StatusBadRequest, "required"},
		{"", "/nosuchpage", http.StatusNotFound, "Not Found"},
		{"otto", "/nosuchpage", http.StatusNotFound, "Not Found"},
		{"ada", "/api/v1/nosuch", http.StatusNotFound, `"error"`},
		{"", "/admin/nosuch", http.StatusNotFound, "Not Found"},
		{"vera", depPath + "&range=2y", http.StatusBadRequest, "range"},
	} {
		t.Run(tc.user+tc.path, func(t *testing.T) {
			c := h.client()
			if tc.user != "" {
				c = h.login(tc.user)
			}
			res := c.get(tc.path)
			if res.status != tc.status || !strings.Contains(res.body, tc.has) {
				t.Fatalf("GET %s as %q = %d, want %d with %q; body:\n%.400s", tc.path, tc.user, res.status, tc.status, tc.has, res.body)
			}
		})
	}
	t.Run("viewer gets no operator panel", func(t *testing.T) {
		if body := h.login("vera").get(depPath).body; strings.Contains(body, "operator-form") {
			t.Error("viewer sees the operator form")
		}
	})
}

func TestCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 6, 0))
	form := func() url.Values {
		return url.Values{"service": {"checkout"}, "breaker": {"payments"}, "action": {"force_open"},
			"scope": {"all"}, "ttl": {"15"}, "reason": {"drill the fallback"}}
	}
	t.Run("viewer cannot trip", func(t *testing.T) {
		c := h.login("vera")
		for _, p := range []string{"/dependency/confirm", "/dependency/command"} {
			if res := c.postForm(p, form()); res.status != http.StatusForbidden {
				t.Errorf("POST %s as viewer = %d, want 403", p, res.status)
			}
		}
	})
	t.Run("a forged form without CSRF token is refused", func(t *testing.T) {
		c := h.login("otto")
		if res := c.rawPost("/dependency/command", form()); res.status != http.StatusForbidden {
			t.Errorf("POST without token = %d, want 403", res.status)
		}
		f := form()
		f.Set("_csrf", "forged")
		if res := c.rawPost("/dependency/command", f); res.status != http.StatusForbidden {
			t.Errorf("POST with forged token = %d, want 403", res.status)
		}
	})
	t.Run("confirmation shows the blast radius", func(t *testing.T) {
		res := h.login("otto").postForm("/dependency/confirm", form())
		want := "This will reject calls from 6 instances of checkout to payments for 15 minutes"
		if res.status != http.StatusOK || !strings.Contains(res.body, want) {
			t.Fatalf("confirm = %d, lacks %q:\n%.600s", res.status, want, res.body)
		}
	})
	t.Run("invalid commands are 400 naming the field", func(t *testing.T) {
		c := h.login("otto")
		for field, bad := range map[string]string{"reason": "", "ttl": "0", "action": "explode", "scope": "moon"} {
			f := form()
			f.Set(field, bad)
			if res := c.postForm("/dependency/command", f); res.status != http.StatusBadRequest || !strings.Contains(res.body, field) {
				t.Errorf("%s=%q: %d %.200s", field, bad, res.status, res.body)
			}
		}
	})
	// A hold reaches the instances that are live (reported within the stale
	// timeout); waits in earlier subtests move the virtual clock on.
	fresh := func() { h.fleet(dep("checkout", "payments", 6, 0)) }
	t.Run("operator issues a command that lands in the audit log", func(t *testing.T) {
		fresh()
		c := h.login("otto")
		res := c.postForm("/dependency/command", form())
		if res.status != http.StatusSeeOther {
			t.Fatalf("command = %d %.300s", res.status, res.body)
		}
		cmds, err := h.st.Commands(context.Background(), cbdash.CommandQuery{})
		if err != nil || len(cmds) != 1 {
			t.Fatalf("commands = %v, %v", cmds, err)
		}
		if c := cmds[0]; c.Actor != "otto" || c.Action != "force_open" || c.TTL.Minutes() != 15 || c.Reason != "drill the fallback" {
			t.Errorf("command = %+v", c)
		}
		audit := h.login("vera").get("/audit").body
		for _, want := range []string{"otto", "force open", "drill the fallback", "all instances", "6 pending"} {
			if !strings.Contains(audit, want) {
				t.Errorf("audit log lacks %q", want)
			}
		}
	})
	t.Run("a share reaches that share of the instances", func(t *testing.T) {
		fresh()
		f := form()
		f.Set("scope", "share")
		f.Set("share", "50")
		f.Set("reason", "canary the fallback")
		c := h.login("otto")
		if res := c.postForm("/dependency/confirm", f); !strings.Contains(res.body, "about 3 instances (50%)") {
			t.Errorf("confirm = %d, lacks the share's blast radius:\n%.600s", res.status, res.body)
		}
		if res := c.postForm("/dependency/command", f); res.status != http.StatusSeeOther {
			t.Fatalf("command = %d %.300s", res.status, res.body)
		}
		cmds, err := h.st.Commands(context.Background(), cbdash.CommandQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var share *cbdash.Command
		for i := range cmds {
			if cmds[i].Reason == "canary the fallback" {
				share = &cmds[i]
			}
		}
		// A share is chosen by a stable hash of each instance id (the same
		// instance stays on its side across restarts), so the instances it
		// reaches are those in cbdash.InShare, not "half of them".
		var want []string
		for i := 1; i <= 6; i++ {
			if inst := fmt.Sprintf("checkout-%d", i); cbdash.InShare(inst, 50) {
				want = append(want, inst)
			}
		}
		if share == nil {
			holds, _ := h.col.Holds(context.Background(), false, 0)
			d, _ := h.col.Dependency(cbdash.DependencyKey{Service: "checkout", Breaker: "payments"})
			var insts []string
			for _, ib := range d.PerInstance {
				insts = append(insts, fmt.Sprintf("%s stale=%v seen=%v", ib.Instance, ib.Stale, ib.LastSeen))
			}
			t.Fatalf("no command with the share's reason; now %v holds %+v; instances %v", h.clock.Now(), holds, insts)
		}
		var got []string
		for _, tg := range share.Targets {
			got = append(got, tg.Instance)
		}
		slices.Sort(got)
		if share.Share != 50 || !slices.Equal(got, want) {
			t.Fatalf("share command = %+v, want 50%% sent to %v (their hash is in the share)", share, want)
		}
		audit := h.login("vera").get("/audit").body
		for _, want := range []string{"canary the fallback", "50% of instances", fmt.Sprintf("%d pending", len(want))} {
			if !strings.Contains(audit, want) {
				t.Errorf("audit log lacks %q", want)
			}
		}
	})
}
