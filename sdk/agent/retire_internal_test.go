package agent

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
)

func TestForgottenReportsDoNotKeepBreakersAlive(t *testing.T) {
	var f forgottenReports
	for i := range 100 {
		b, err := breaker.New(fmt.Sprint("b", i), breaker.Config{})
		if err != nil {
			t.Fatal(err)
		}
		f.put(b, reportState{reported: true})
	}
	kept, err := breaker.New("kept", breaker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f.put(kept, reportState{reported: true, inFlight: 7})
	// Cleanups run after a collection, on their own goroutine: collect
	// until they have, within a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for f.len() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d breakers still remembered after they became garbage", f.len())
		}
		runtime.GC()
		runtime.Gosched()
	}
	if rep, ok := f.take(kept); !ok || rep.inFlight != 7 {
		t.Fatalf("the live breaker's report state was lost: %+v, %v", rep, ok)
	}
	if _, ok := f.take(kept); ok {
		t.Fatal("take did not forget")
	}
	f.put(kept, reportState{inFlight: 8}) // unregistered again
	if rep, ok := f.take(kept); !ok || rep.inFlight != 8 || f.len() != 1 {
		t.Fatalf("after a second put: %+v, %v, %d remembered", rep, ok, f.len())
	}
}
