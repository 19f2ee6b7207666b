package source

import (
	"encoding/json"
	"testing"
)

// The forms a value of a HystrixCommand record comes in: a service's own
// JSON, Turbine 1.x's (integers summed, other values strings, disagreeing
// hosts as "{v:n,...}") and Turbine 2's (settings as strings, disagreeing
// hosts as {"v":n}).
func TestHystrixValueForms(t *testing.T) {
	for _, tc := range []struct {
		in      string
		v       float64
		summed  bool
		perHost float64 // of 2 hosts
		bad     bool
	}{
		{`50`, 50, true, 25, false},
		{`"50"`, 50, false, 50, false},
		{`"33.3"`, 33.3, false, 33.3, false},
		{`{"50":1,"60":1}`, 60, false, 60, false},
		{`{"50":2,"60":1}`, 50, false, 50, false},
		{`"{50:2,60:1}"`, 50, false, 50, false},
		{`null`, 0, false, 0, false},
		{`"many"`, 0, false, 0, true},
		{`1e400`, 0, false, 0, true},
		{`{"fifty":1}`, 0, false, 0, true},
		{`"{50:x}"`, 0, false, 0, true},
	} {
		var n hystrixNum
		if err := json.Unmarshal([]byte(tc.in), &n); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if (n.err != nil) != tc.bad || (!tc.bad && (n.v != tc.v || n.summed != tc.summed || n.perHost(2) != tc.perHost)) {
			t.Errorf("%s: %+v (per host of 2: %v), want %v summed %v per host %v bad %v", tc.in, n, n.perHost(2), tc.v, tc.summed, tc.perHost, tc.bad)
		}
	}
	for _, tc := range []struct {
		in        string
		trueHosts float64 // of 2
		any, bad  bool
	}{
		{`true`, 2, true, false},
		{`false`, 0, false, false},
		{`"true"`, 2, true, false},
		{`"false"`, 0, false, false},
		{`"{false:1,true:1}"`, 1, true, false},
		{`{"false":1,"true":1}`, 1, true, false},
		{`{"true":2}`, 2, true, false},
		{`"maybe"`, 0, false, true},
		{`"{false:1,maybe:1}"`, 0, false, true},
		{`3`, 0, false, true},
	} {
		var b hystrixBool
		if err := json.Unmarshal([]byte(tc.in), &b); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if (b.err != nil) != tc.bad || (!tc.bad && (b.trueHosts(2) != tc.trueHosts || b.any() != tc.any)) {
			t.Errorf("%s: %+v, want %v of 2 hosts true, any %v, bad %v", tc.in, b, tc.trueHosts, tc.any, tc.bad)
		}
	}
	for in, want := range map[string]string{`"THREAD"`: "THREAD", `{"THREAD":1,"SEMAPHORE":2}`: "SEMAPHORE", `"{SEMAPHORE:1,THREAD:1}"`: "SEMAPHORE"} {
		var s hystrixText
		if err := json.Unmarshal([]byte(in), &s); err != nil || s.v != want || s.err != nil {
			t.Errorf("%s: %+v, %v; want %q", in, s, err, want)
		}
	}
}
