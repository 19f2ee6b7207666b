package web_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/web"
)

// TestHeatmapPaginatesWorstFirst: 60 instances, the first three open:
// page one holds 50 rows starting with the open ones, page two the last
// 10.
func TestHeatmapPaginatesWorstFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 60, 3))
	vera := h.login("vera")
	rows := regexp.MustCompile(`data-testid="heat-row" data-instance="([^"]+)"`)
	page := vera.get("/dependency?service=checkout&breaker=payments").body
	first := rows.FindAllStringSubmatch(page, -1)
	if len(first) != 50 {
		t.Fatalf("page one has %d rows, want 50", len(first))
	}
	for i, want := range []string{"checkout-1", "checkout-2", "checkout-3"} {
		if first[i][1] != want {
			t.Errorf("row %d is %s, want the open %s", i, first[i][1], want)
		}
	}
	if !strings.Contains(page, "instances 1-50 of 60") || !strings.Contains(page, `data-testid="heat-next"`) {
		t.Fatalf("page one lacks its count or next link")
	}
	next := regexp.MustCompile(`href="([^"]+)" data-testid="heat-next"`).FindStringSubmatch(page)[1]
	second := vera.get(strings.ReplaceAll(next, "&amp;", "&")).body
	if n := len(rows.FindAllString(second, -1)); n != 10 || !strings.Contains(second, "instances 51-60 of 60") || !strings.Contains(second, `data-testid="heat-prev"`) {
		t.Errorf("page two has %d rows (want 10) or lacks its count or previous link", n)
	}
	if strings.Contains(second, `data-testid="heat-next"`) {
		t.Error("the last page links a next one")
	}
}
