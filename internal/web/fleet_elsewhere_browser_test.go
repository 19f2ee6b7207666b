package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/stacktest"
)

// elsewhereFleet is two collectors over one PostgreSQL schema with
// checkout-1 reporting to A and checkout-2 to B, once A's dependency
// lists both (checkout-2's line read from the store); start is when the
// agents started.
func elsewhereFleet(t *testing.T, nodeA, nodeB string) (a *harness, start time.Time) {
	t.Helper()
	a, b := twoCollectors(t, nodeA, nodeB)
	start = a.clock.Now()
	for i, s := range []*stacktest.Stack{a.stack, b} {
		fleetAgent(t, a.clock, s, fmt.Sprintf("checkout-%d", i+1))
	}
	k := cbdash.DependencyKey{Service: "checkout", Breaker: "payments"}
	eventually.Within(t, stepTimeout, "A listing checkout-2 (on B) from the store", func() bool {
		d, err := a.col.Dependency(k)
		return err == nil && len(d.PerInstance) == 2 && d.PerInstance[1].Instance == "checkout-2"
	})
	return a, start
}

// TestCollectorASaysBsInstanceIsOnAnotherCollector is the new-user
// trial's check: on collector A, the line of checkout-2 (served by B,
// read from the store, no window) is marked served_elsewhere in
// GET /api/v1/breakers/{service}/{breaker} (absent on A's own
// checkout-1), its rates' words say "on another collector", and A's
// dependency page says so beside its state with "–" for its calls and
// rates, never "0/s" or "not judged yet (no calls)", and its heatmap
// row, until B has stored a minute of it, not "0% failed (0/0)".
func TestCollectorASaysBsInstanceIsOnAnotherCollector(t *testing.T) {
	t.Parallel()
	postgresOnly(t)
	a, start := elsewhereFleet(t, "elsewherea", "elsewhereb")
	c := a.login("otto")

	res := c.get("/api/v1/breakers/checkout/payments")
	if res.status != http.StatusOK {
		t.Fatalf("GET /api/v1/breakers/checkout/payments: %d %s", res.status, res.body)
	}
	var dep struct {
		PerInstance []map[string]json.RawMessage `json:"per_instance"`
	}
	if err := json.Unmarshal([]byte(res.body), &dep); err != nil {
		t.Fatal(err)
	}
	if len(dep.PerInstance) != 2 {
		t.Fatalf("the API lists %d members, want 2: %s", len(dep.PerInstance), res.body)
	}
	for _, m := range dep.PerInstance {
		var inst string
		_ = json.Unmarshal(m["instance"], &inst)
		var shown cbdash.ShownRates
		_ = json.Unmarshal(m["shown"], &shown)
		el, has := m["served_elsewhere"]
		switch inst {
		case "checkout-1":
			if has {
				t.Errorf("A's own checkout-1 has served_elsewhere %s, want it absent", el)
			}
			if shown.Failure.Text == "on another collector" {
				t.Errorf("A's own checkout-1's failure rate says %q", shown.Failure.Text)
			}
		case "checkout-2":
			if string(el) != "true" {
				t.Errorf("checkout-2 (on B) has served_elsewhere %q, want true", el)
			}
			if shown.Failure.Text != "on another collector" || shown.Slow.Text != "on another collector" {
				t.Errorf("checkout-2's rates say %q and %q, want \"on another collector\"", shown.Failure.Text, shown.Slow.Text)
			}
			if _, ok := m["last"]; !ok {
				t.Errorf("checkout-2 has no last: it stays (a zero window) for the clients that read it")
			}
		default:
			t.Errorf("unexpected member %q", inst)
		}
	}

	page := c.get("/dependency?service=checkout&breaker=payments")
	if page.status != http.StatusOK {
		t.Fatalf("A's dependency page: %d", page.status)
	}
	rows := instanceRowTexts(page.body)
	if !strings.Contains(rows["checkout-2"], "on another collector") || strings.Count(rows["checkout-2"], "–") < 4 {
		t.Errorf("checkout-2's row on A = %q, want \"on another collector\" and – for its calls and rates", rows["checkout-2"])
	}
	for _, bad := range []string{"0/s", "no calls", "not judged"} {
		if strings.Contains(rows["checkout-2"], bad) {
			t.Errorf("checkout-2's row on A = %q, says %q", rows["checkout-2"], bad)
		}
	}
	if r := rows["checkout-1"]; !strings.Contains(r, "/s") || strings.Contains(r, "on another collector") {
		t.Errorf("A's own checkout-1's row = %q, want its calls per second and no \"on another collector\"", r)
	}
	// The heatmap: B stores checkout-2's minutes once their minute has
	// ended and 10 s more have passed (a slow machine may get there); until
	// then its row says so, not "0% failed (0/0)".
	heat := heatSummaryRE.FindStringSubmatch(page.body)
	stored := !a.clock.Now().Before(start.Truncate(time.Minute).Add(70 * time.Second))
	if heat == nil || strings.Contains(heat[1], "(0/0)") || (!stored && !strings.HasPrefix(heat[1], "on another collector")) {
		t.Errorf("checkout-2's heatmap summary on A = %q, want that it is on another collector", heat)
	}
}

var heatSummaryRE = regexp.MustCompile(`<span class="nowrap">checkout-2</span> <span class="muted small" data-testid="heat-summary">([^<]*)</span>`)

var (
	instanceRowRE = regexp.MustCompile(`(?s)<tr[^>]*data-testid="instance-row"[^>]*>.*?</tr>`)
	tagRE         = regexp.MustCompile(`<[^>]+>`)
)

// instanceRowTexts is the text of each instance row of a dependency
// page, by its instance (the first word).
func instanceRowTexts(body string) map[string]string {
	out := map[string]string{}
	for _, r := range instanceRowRE.FindAllString(body, -1) {
		f := strings.Fields(tagRE.ReplaceAllString(r, " "))
		if len(f) > 0 {
			out[f[0]] = strings.Join(f, " ")
		}
	}
	return out
}

// TestBrowserADependencyPageSaysBsInstanceIsOnAnotherCollector: on A's
// dependency page in the browser, checkout-2's row (served by B) shows
// "on another collector" beside its state and "–" for its calls and
// rates, and at 1440 and 390 px the note stays within its cell.
func TestBrowserADependencyPageSaysBsInstanceIsOnAnotherCollector(t *testing.T) {
	t.Parallel()
	postgresOnly(t)
	ctx := browser(t)
	a, _ := elsewhereFleet(t, "elsewherebra", "elsewherebrb")
	login(t, ctx, a.url, "otto", "operator-password")
	const row = `[...document.querySelectorAll("[data-testid=instance-row]")].find(r => r.cells[0].textContent.trim() === "checkout-2")`
	for _, w := range []int64{1440, 390} {
		run(t, ctx, stepTimeout, fmt.Sprintf("A's dependency page at %d px", w), narrow(w),
			chromedp.Navigate(a.url+"/dependency?service=checkout&breaker=payments"), chromedp.WaitVisible(css(`[data-testid=instance-elsewhere]`)))
		text := get(t, ctx, "checkout-2's row", chromedp.Evaluate[string](row+`.innerText`))
		if !strings.Contains(text, "on another collector") || strings.Contains(text, "0/s") || strings.Contains(text, "no calls") {
			t.Errorf("at %d px checkout-2's row says %q", w, text)
		}
		g := get(t, ctx, "the note's geometry", chromedp.Evaluate[[]float64](`(() => {
			const n = `+row+`.querySelector("[data-testid=instance-elsewhere]"), c = n.closest("td"), r = n.closest("tr");
			const nb = n.getBoundingClientRect(), cb = c.getBoundingClientRect(), rb = r.getBoundingClientRect();
			return [nb.left, nb.right, nb.top, nb.bottom, cb.left, cb.right, cb.top, cb.bottom, rb.right, nb.width];
		})()`))
		if g[0] < g[4]-1 || g[1] > g[5]+1 || g[2] < g[6]-1 || g[3] > g[7]+1 || g[1] > g[8]+1 || g[9] < 20 {
			t.Errorf("at %d px the note spans x %v-%v, y %v-%v, outside its cell (x %v-%v, y %v-%v) or its row (right %v)",
				w, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8])
		}
		title := get(t, ctx, "a cell's title", chromedp.Evaluate[string](row+`.querySelector("[data-testid=instance-elsewhere-cell]").title`))
		if !strings.Contains(title, "served by another collector") {
			t.Errorf("at %d px checkout-2's calls cell has title %q", w, title)
		}
		if o := get(t, ctx, "overflow", chromedp.Evaluate[string](overflow)); o != "" {
			t.Errorf("at %d px the dependency page scrolls sideways: %s", w, o)
		}
		run(t, ctx, stepTimeout, "the instances in view", chromedp.ScrollIntoView(css(`[data-testid=instance-elsewhere]`)))
		screenshot(t, ctx, fmt.Sprintf("fleet-a-elsewhere-%d.png", w))
	}
}
