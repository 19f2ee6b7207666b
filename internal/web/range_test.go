package web_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/web"
)

func TestTheDependencyPageKeepsItsRangeThroughACommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	otto := h.login("otto")
	page := otto.get("/dependency?service=checkout&breaker=payments&range=6h")
	if page.status != http.StatusOK || !strings.Contains(page.body, `name="view_range" value="6h"`) {
		t.Fatalf("the operator form does not carry the range 6h: %d", page.status)
	}
	form := url.Values{"service": {"checkout"}, "breaker": {"payments"}, "action": {"reset"}, "scope": {"all"},
		"reason": {"keep my range"}, "view_range": {"6h"}}
	confirm := otto.postForm("/dependency/confirm", form)
	if !strings.Contains(confirm.body, `name="view_range" value="6h"`) || !strings.Contains(confirm.body, `range=6h`) {
		t.Fatalf("the confirmation drops the range (its cancel link too):\n%.800s", confirm.body)
	}
	res := otto.postForm("/dependency/command", form)
	if loc := res.header.Get("Location"); res.status != http.StatusSeeOther || !strings.Contains(loc, "range=6h") {
		t.Fatalf("after the command: %d to %q, want back on range=6h", res.status, loc)
	}
	// A custom range is carried the same way; a forged one is dropped.
	form.Del("view_range")
	from := h.clock.Now().Add(-2 * time.Hour).UTC().Format("2006-01-02T15:04")
	form.Set("view_from", from)
	if loc := otto.postForm("/dependency/command", form).header.Get("Location"); !strings.Contains(loc, "from="+url.QueryEscape(from)) {
		t.Errorf("custom range: back to %q", loc)
	}
	form.Set("view_from", "javascript:alert(1)")
	if loc := otto.postForm("/dependency/command", form).header.Get("Location"); strings.Contains(loc, "from=") {
		t.Errorf("a bad range went into the redirect: %q", loc)
	}
}

func TestCustomRangeOnTheDependencyPage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	vera := h.login("vera")
	from := h.clock.Now().Add(-90 * time.Minute).UTC().Format("2006-01-02T15:04")
	res := vera.get("/dependency?service=checkout&breaker=payments&from=" + url.QueryEscape(from))
	if res.status != http.StatusOK || !strings.Contains(res.body, `data-testid="custom-range"`) || !strings.Contains(res.body, `value="`+from+`"`) {
		t.Fatalf("custom range: %d", res.status)
	}
	if !strings.Contains(res.body, "from="+url.QueryEscape(from)) {
		t.Error("the live socket does not follow the custom range")
	}
	if bad := vera.get("/dependency?service=checkout&breaker=payments&from=soon"); bad.status != http.StatusBadRequest || !strings.Contains(bad.body, "from") {
		t.Errorf("bad from: %d %.200s", bad.status, bad.body)
	}
}

func TestRangesStartWithTheData(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	seed(t, h, "checkout-1") // the last minute
	vera := h.login("vera")
	now := h.clock.Now().UTC()

	t.Run("the dependency page's default range starts at the first data", func(t *testing.T) {
		body := vera.get("/dependency?service=checkout&breaker=payments").body
		first := now.Add(-time.Minute).Truncate(time.Minute)
		want := `data-testid="range-text">` + first.Format("2006-01-02 15:04:05") + " – "
		if !strings.Contains(body, want) {
			t.Errorf("range text lacks %q (a minute of data in the default hour)", want)
		}
		if chosen := vera.get("/dependency?service=checkout&breaker=payments&range=1h").body; !strings.Contains(chosen, `data-testid="range-text">`+now.Add(-time.Hour).Format("2006-01-02 15:04:05")) {
			t.Error("a range the user chose is not shortened")
		}
	})
	t.Run("the timeline leaves the time before the first record blank", func(t *testing.T) {
		body := vera.get("/timeline?range=6h").body
		if !strings.Contains(body, `data-testid="no-data-until"`) {
			t.Fatalf("no note of the first record:\n%.2000s", body)
		}
		m := regexp.MustCompile(`data-testid="lane-bg" x="([0-9.]+)"`).FindStringSubmatch(body)
		if m == nil {
			t.Fatal("no lane")
		}
		// The range is 6 h and the fleet is minutes old: the closed
		// background starts near the right end (X0 260 + 1000 wide).
		if x, _ := strconv.ParseFloat(m[1], 64); x < 260+900 {
			t.Errorf("the lane's closed background starts at x %v: it paints hours before the first record", x)
		}
	})
}
