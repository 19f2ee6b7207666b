package holds

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestPlanShareIsOfTheLabelledInstances is finding 12 of the demo trial:
// `trip '*/db' --label team=catalog --share 50 --dry-run` on five
// instances, two of them labelled team=catalog, said "1 of 5
// instance(s) (20% reached)": the share was reckoned against every
// instance with the breaker, labels or not. The labels choose the
// instances a share is of: 1 of 2, 50 %.
func TestPlanShareIsOfTheLabelledInstances(t *testing.T) {
	m, f, st := newTestManager(t)
	for _, k := range []Key{{"catalog", "catalog-1"}, {"catalog", "catalog-2"}, {"checkout", "checkout-1"}, {"checkout", "checkout-2"}, {"search", "search-1"}} {
		f.connect(st.Store, k)
		in := f.insts[k]
		in.Ref.Labels = map[string]string{"team": k.Service}
		f.insts[k] = in
	}
	req := cbdash.HoldRequest{Selector: cbdash.Selector{Service: cbdash.AnyService, Breaker: "db", Labels: map[string]string{"team": "catalog"}, Share: 50},
		Action: protocol.ActionForceOpen, TTL: time.Minute, Reason: "drill", Actor: "ops"}
	p, err := m.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// catalog-2's share bucket is 15.6 (in a 50 % share), catalog-1's 97.7.
	if !slices.Equal(p.Instances, []string{"catalog/catalog-2"}) || p.Eligible != 2 {
		t.Errorf("plan covers %v of %d eligible, want catalog/catalog-2 of the 2 labelled team=catalog", p.Instances, p.Eligible)
	}
}
