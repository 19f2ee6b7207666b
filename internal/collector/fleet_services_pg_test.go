package collector

import (
	"testing"

	"github.com/cbdash/cbdash/internal/eventually"
)

// TestServicesOnACountTheInstancesOfB: GET /api/v1/services on A counts
// the service's instances B serves (from B's summaries), as one
// collector counts them: a1 on A, b1 and b2 on B make three.
func TestServicesOnACountTheInstancesOfB(t *testing.T) {
	t.Parallel()
	a, b := twoCollectors(t, "svca", "svcb", nil)
	connect(t, a, "a1", 10, 0)
	connect(t, b, "b1", 10, 0)
	connect(t, b, "b2", 20, 0)
	waitForBsPart(t, a, 2, 30)
	eventually.True(t, "A's services: api with 3 instances", func() bool {
		svcs := a.col.Services()
		return len(svcs) == 1 && svcs[0].Name == "api" && svcs[0].Instances == 3 && svcs[0].Stale == 0 && svcs[0].Breakers == 2
	})
}
