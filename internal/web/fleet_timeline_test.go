package web_test

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/web"
)

// TestOverviewFleetLineCountsWhatWasNotClosedAndLinksTheTimeline: two
// dependencies with open instances two minutes ago, one reported open now:
// the overview's line has 60 minutes, those two minutes count them, and a
// minute links to /timeline ending shortly after it.
func TestOverviewFleetLineCountsWhatWasNotClosedAndLinksTheTimeline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 3, 2), dep("search", "index", 2, 1))
	clk := h.virtual()
	clk.Advance(2 * time.Minute)
	h.report("search", "index", "search-1", "open") // the only report of this minute
	vera := h.login("vera")
	page := vera.get("/").body
	points := regexp.MustCompile(`<a href="([^"]+)" data-testid="fleet-point" data-instances="(\d+)" data-deps="(\d+)" data-time="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(points) != 60 {
		t.Fatalf("%d minutes on the fleet line, want 60", len(points))
	}
	byTime := map[string][]string{}
	for _, p := range points {
		byTime[p[4]] = p
	}
	// A report covers the second before it is sent.
	then := h.clock.Now().Add(-2*time.Minute - time.Second).UTC()
	now := h.clock.Now().Add(-time.Second).UTC()
	if p := byTime[then.Format("15:04")]; p == nil || p[2] != "3" || p[3] != "2" {
		t.Errorf("two minutes ago: %v, want 3 instances on 2 dependencies", p)
	}
	if p := byTime[now.Format("15:04")]; p == nil || p[2] != "1" || p[3] != "1" {
		t.Errorf("now: %v, want 1 instance on 1 dependency", p)
	}
	if !strings.Contains(page, "peak 3 instances on 2 dependencies at "+then.Format("15:04")+" UTC") {
		t.Error("the peak is not named")
	}
	href, _ := url.Parse(strings.ReplaceAll(byTime[then.Format("15:04")][1], "&amp;", "&"))
	end, _ := strconv.ParseInt(href.Query().Get("end"), 10, 64)
	if href.Path != "/timeline" || href.Query().Get("range") != "15m" || time.Unix(end, 0).Before(then) || time.Unix(end, 0).After(now.Add(2*time.Second)) {
		t.Errorf("the minute links %s, want /timeline over 15m ending after it", href)
	}
	if res := vera.get(href.String()); res.status != 200 {
		t.Errorf("the linked timeline answers %d", res.status)
	}
	if frag := vera.get("/overview/fleet-timeline"); frag.status != 200 || !strings.Contains(frag.body, `data-testid="fleet-timeline"`) || strings.Contains(frag.body, "<html") {
		t.Errorf("the fragment: %d", frag.status)
	}
}
