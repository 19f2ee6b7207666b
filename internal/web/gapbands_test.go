package web

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
)

func TestOverlappingGapsOfTwoInstancesAreOneBandClippedToThePlot(t *testing.T) {
	t.Parallel()
	from := clocktest.Epoch().Truncate(time.Hour)
	to := from.Add(10 * time.Minute)
	gaps := []cbdash.Gap{
		{Instance: "b", From: from.Add(3 * time.Minute), To: from.Add(5 * time.Minute), Calls: 7},
		{Instance: "a", From: from.Add(-time.Minute), To: from.Add(time.Minute), Calls: 1},
		{Instance: "a", From: from.Add(4 * time.Minute), To: from.Add(6 * time.Minute), Calls: 3},
	}
	bands := gapBands(gaps, from, to)
	if len(bands) != 2 {
		t.Fatalf("bands %+v, want two", bands)
	}
	perMin := (chartRight - chartLeft) / 10
	if b := bands[0]; b.X != chartLeft || math.Abs(b.W-perMin) > 1e-9 {
		t.Errorf("first band x %v w %v, want clipped to the plot's start, one minute wide", b.X, b.W)
	}
	if b := bands[1]; math.Abs(b.X-chartLeft-3*perMin) > 1e-9 || math.Abs(b.W-3*perMin) > 1e-9 || !strings.Contains(b.Title, "b, a") || !strings.Contains(b.Title, "(10 calls") {
		t.Errorf("second band %+v, want minutes 3-6 of both instances, 10 calls", b)
	}
}
