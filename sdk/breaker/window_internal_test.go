package breaker

import (
	"math/rand/v2"
	"testing"
)

// TestCountWindowMatchesTheLastCalls checks the count window, with its
// counted-but-not-yet-pushed successes, against a plain list of the last
// calls, over random sequences.
func TestCountWindowMatchesTheLastCalls(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		size, minCalls := 1+r.IntN(12), 1+r.IntN(12)
		w := newCountWindow(size, minCalls)
		var model []uint8
		for i := range 300 {
			failed, slow := r.IntN(4) == 0, r.IntN(6) == 0
			if r.IntN(3) == 0 { // runs of plain successes
				failed, slow = false, false
			}
			var mark uint8
			if failed {
				mark |= markFailed
			}
			if slow {
				mark |= markSlow
			}
			model = append(model, mark)
			if len(model) > size {
				model = model[1:]
			}
			var want counts
			want.calls = int64(len(model))
			for _, m := range model {
				want.fails += int64(m & markFailed)
				want.slow += int64(m&markSlow) >> 1
			}
			got, judged := w.record(0, failed, slow, uint8(r.IntN(numStripes)))
			if judged && got != want {
				t.Fatalf("size %d min %d call %d: record says %+v, want %+v", size, minCalls, i, got, want)
			}
			if !judged && (failed || slow || want.calls < int64(min(size, minCalls))) {
				t.Fatalf("size %d min %d call %d: a call that could trip was not judged", size, minCalls, i)
			}
			if r.IntN(5) == 0 {
				if got := w.stats(0); got != want {
					t.Fatalf("size %d min %d call %d: stats %+v, want %+v", size, minCalls, i, got, want)
				}
			}
		}
	}
}
