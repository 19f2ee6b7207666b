package live

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestCommandTargetsAreTheDependencysMembers: a command goes to the
// instances that declare the breaker, those that come and go included;
// an instance that does not declare it is not found.
func TestCommandTargetsAreTheDependencysMembers(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	db := protocol.BreakerConfig{Name: "db"}
	for _, name := range []string{"c", "a", "b", "d"} {
		l.Hello(testHello("api", name, db, nil), 0, nil, clk.Now(), nil)
	}
	l.Hello(testHello("api", "x", protocol.BreakerConfig{Name: "cache"}, nil), 0, nil, clk.Now(), nil)
	k := cbdash.DependencyKey{Service: "api", Breaker: "db"}
	targets := func(what, instance string, want ...string) {
		t.Helper()
		got, err := l.Targets(k, instance, 100)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: targets %v (%v), want %v", what, got, err, want)
		}
	}
	targets("all", "", "a", "b", "c", "d")
	targets("one", "b", "b")
	if _, err := l.Targets(k, "x", 100); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("an instance without the breaker: %v, want not found", err)
	}
	// a drops the breaker, b is forgotten, e comes.
	l.Hello(testHello("api", "a", protocol.BreakerConfig{Name: "cache"}, nil), 0, nil, clk.Now(), nil)
	clk.Advance(11 * time.Minute)
	for _, name := range []string{"c", "d", "x"} {
		l.Hello(testHello("api", name, db, nil), 0, nil, clk.Now(), nil)
	}
	l.Hello(testHello("api", "e", db, nil), 0, nil, clk.Now(), nil)
	l.Sweep()
	targets("after changes", "", "c", "d", "e", "x")
	if _, err := l.Targets(k, "b", 100); !errors.Is(err, cbdash.ErrNotFound) {
		t.Errorf("a forgotten instance: %v, want not found", err)
	}
	d, _ := l.Dependency(k)
	var lines []string
	for _, ln := range d.PerInstance {
		lines = append(lines, ln.Instance)
	}
	if !slices.Equal(lines, []string{"c", "d", "e", "x"}) || d.Instances != 4 {
		t.Errorf("lines of %v (%d instances), want c, d, e, x", lines, d.Instances)
	}
}
