package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestHistoryCountsTheReportsOfEachBucket: a second's point says how many
// window reports it merges (the instances that reported it, which a
// replay divides the second's calls among); a minute's sums them.
func TestHistoryCountsTheReportsOfEachBucket(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	for i, inst := range []string{"pay-1", "pay-2", "pay-3"} {
		ws := []protocol.Window{window("db", t0, protocol.StateClosed, 3, 1)}
		if i < 2 {
			ws = append(ws, window("db", t0.Add(time.Second), protocol.StateClosed, 3, 1))
		}
		mustSave(t, s, "pay", inst, 1, protocol.Batch{Seq: 1, Windows: ws})
	}
	for _, c := range []struct {
		res  cbdash.Resolution
		want []int64
	}{{cbdash.ResolutionSecond, []int64{3, 2}}, {cbdash.ResolutionMinute, []int64{5}}} {
		p, err := s.History(context.Background(), cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: t0.Add(time.Minute), Resolution: c.res})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, pt := range p {
			got = append(got, pt.Reports)
		}
		if len(got) != len(c.want) || got[0] != c.want[0] || got[len(got)-1] != c.want[len(c.want)-1] {
			t.Errorf("%s: reports %v, want %v", c.res, got, c.want)
		}
	}
}
