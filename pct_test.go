package cbdash

import (
	"math"
	"strconv"
	"testing"
)

// appendPct's whole-number path writes what AppendFloat(v, 'f', 0) does.
func TestPctOfWholeNumbersIsAppendFloats(t *testing.T) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1, 50, 100, 99999, 1e14, 1e15 - 1, 1e15, 1e300, -3, math.Inf(1), math.NaN(), 12.5, 0.05, 0.15} {
		prec := 1
		if v == math.Trunc(v) {
			prec = 0
		}
		want := strconv.FormatFloat(v, 'f', prec, 64) + "%"
		if got := Pct(v); got != want {
			t.Errorf("Pct(%v) = %q, want %q", v, got, want)
		}
	}
}
