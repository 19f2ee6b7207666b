package web

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
)

// pageOf keeps only the first tiles as it goes: every page, in every
// order, is the slice of the whole fleet sorted (sortDeps).
func TestPageOfIsTheSortedFleetsSlice(t *testing.T) {
	t.Parallel()
	deps, _ := fleetOf(1234, clocktest.Epoch())
	for _, how := range []string{"worst", "name", "rate"} {
		sorted := slices.Clone(deps)
		sortDeps(sorted, how)
		for page := 1; page <= 27; page++ {
			pg := pageOf(pointers(deps), filter{Sort: how, Page: page})
			last := (len(deps) + tilesPerPage - 1) / tilesPerPage
			from := (min(page, last) - 1) * tilesPerPage
			want := sorted[from:min(len(sorted), from+tilesPerPage)]
			got := valuesOf(pg.Deps)
			if !slices.EqualFunc(got, want, func(a, b cbdash.Dependency) bool { return a.DependencyKey == b.DependencyKey }) {
				t.Fatalf("%s, page %d: %v..., want %v...", how, page, keysOf(got)[:3], keysOf(want)[:3])
			}
			if pg.Page != min(page, last) || pg.Pages != last || pg.Matched != len(deps) || pg.Total != len(deps) {
				t.Errorf("%s, page %d: %+v", how, page, fmt.Sprint(pg.Page, pg.Pages, pg.Matched, pg.Total))
			}
		}
	}
	// Grouped: each service's tiles together, services in the order of
	// their worst tile, a page of tilesPerPage.
	pg := pageOf(pointers(deps), filter{Sort: "worst", Group: true, Page: 2})
	if len(pg.Deps) != tilesPerPage {
		t.Fatalf("grouped page 2 has %d tiles", len(pg.Deps))
	}
	for i := 1; i < len(pg.Deps); i++ {
		if a, b := pg.Deps[i-1], pg.Deps[i]; a.Service == b.Service && depLess(b, a, "worst") {
			t.Errorf("grouped: %v before %v", a.DependencyKey, b.DependencyKey)
		}
	}
}
