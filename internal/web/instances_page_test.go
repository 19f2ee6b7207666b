package web_test

import (
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestDependencyPageListsTheOddInstancesFirstAPageAtATime: a dependency
// of 120 instances shows 50 at a time, its open instances first whatever
// their names, with links to the next page and to all of them.
func TestDependencyPageListsTheOddInstancesFirstAPageAtATime(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 120, 0))
	h.report("checkout", "payments", "checkout-97", protocol.StateOpen)
	c := h.login("vera")
	path := "/dependency?service=checkout&breaker=payments"
	rows := func(body string) int { return strings.Count(body, `data-testid="instance-row"`) }

	first := c.get(path)
	if n := rows(first.body); n != 50 {
		t.Fatalf("first page lists %d instances, want 50", n)
	}
	table := first.body[strings.Index(first.body, `data-testid="instances-table"`):]
	if open, other := strings.Index(table, "checkout-97<"), strings.Index(table, "checkout-1<"); open < 0 || other < 0 || open > other {
		t.Fatalf("the open instance checkout-97 is not listed first (at %d, checkout-1 at %d)", open, other)
	}
	for _, want := range []string{"1-50 of 120 instances", `data-testid="instances-next"`, `data-testid="instances-all"`, "ipage=2"} {
		if !strings.Contains(first.body, want) {
			t.Errorf("first page lacks %q", want)
		}
	}
	if last := c.get(path + "&ipage=3"); rows(last.body) != 20 || !strings.Contains(last.body, "101-120 of 120") || strings.Contains(last.body, `data-testid="instances-next"`) {
		t.Errorf("third page: %d rows, want the last 20 and no next link", rows(last.body))
	}
	if all := c.get(path + "&iall=1"); rows(all.body) != 120 {
		t.Errorf("show all lists %d instances, want 120", rows(all.body))
	}
}
