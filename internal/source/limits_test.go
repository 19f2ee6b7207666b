package source

import (
	"encoding/json"
	"testing"
)

// TestRecordNumbersUpToJSONsSafeIntegersAreTaken: opossum-hystrix writes
// Number.MAX_SAFE_INTEGER (2^53-1) as its semaphore's "no limit"; a bound
// of 10^12 refused every record of every opossum command (seen by the real
// opossum test, TestNodeOpossum). 2^53 and beyond stays refused.
func TestRecordNumbersUpToJSONsSafeIntegersAreTaken(t *testing.T) {
	for _, tc := range []struct {
		semaphore string
		bad       bool
	}{
		{"9007199254740991", false},
		{"9007199254740992", false},
		{"9007199254740994", true},
		{"1e308", true},
		{"-9007199254740991", false},
	} {
		var c hystrixCommand
		rec := `{"type":"HystrixCommand","name":"inventory","propertyValue_executionIsolationSemaphoreMaxConcurrentRequests":` + tc.semaphore + `}`
		if err := json.Unmarshal([]byte(rec), &c); err != nil {
			t.Fatal(err)
		}
		if field, v, bad := c.outOfRange(); bad != tc.bad {
			t.Errorf("semaphore %s: out of range = %v (%s %g), want %v", tc.semaphore, bad, field, v, tc.bad)
		}
	}
}
