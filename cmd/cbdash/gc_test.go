package main

import (
	"runtime/debug"
	"testing"
)

// TestServeCollectsAtHalfTheLiveHeapUnlessGOGCIsSet: without GOGC in the
// environment serve runs with serveGOGC (50); with it, even empty,
// whatever it says (the runtime applied it at start) is left alone and
// reported.
func TestServeCollectsAtHalfTheLiveHeapUnlessGOGCIsSet(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)

	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "GOGC" && v != "unset" {
				return v, true
			}
			return "", false
		}
	}
	if p, fromEnv := tuneGC(env("unset")); p != 50 || fromEnv {
		t.Fatalf("without GOGC: %d (from the environment: %v), want 50 (false)", p, fromEnv)
	}
	if got := debug.SetGCPercent(100); got != 50 {
		t.Fatalf("without GOGC the runtime's percentage is %d, want 50", got)
	}
	// GOGC=200 in the environment: the runtime has 200 from its start.
	debug.SetGCPercent(200)
	if p, fromEnv := tuneGC(env("200")); p != 200 || !fromEnv {
		t.Fatalf("with GOGC=200: %d (from the environment: %v), want 200 (true)", p, fromEnv)
	}
	if got := debug.SetGCPercent(100); got != 200 {
		t.Fatalf("with GOGC=200 the runtime's percentage became %d", got)
	}
	// GOGC=off: the runtime has -1.
	debug.SetGCPercent(-1)
	if p, fromEnv := tuneGC(env("off")); p != -1 || !fromEnv {
		t.Fatalf("with GOGC=off: %d (from the environment: %v), want -1 (true)", p, fromEnv)
	}
	// GOGC= (empty): in the environment; the runtime has 100 from it.
	debug.SetGCPercent(100)
	if p, fromEnv := tuneGC(env("")); p != 100 || !fromEnv {
		t.Fatalf("with GOGC empty: %d (from the environment: %v), want 100 (true)", p, fromEnv)
	}
}
