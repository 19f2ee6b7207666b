// Package linetest helps tests check that the lines of a published view
// (cbdash.InstanceBreaker, shared with every subscriber) never change
// once published: copy them deeply when the view is published, compare
// later. Used by internal/live's tests and by internal/collector's, for
// views that came through the whole collector.
package linetest

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/cbdash/cbdash"
)

// DeepCopy copies a line and everything it points to.
func DeepCopy(ib *cbdash.InstanceBreaker) cbdash.InstanceBreaker {
	c := *ib
	c.Labels = maps.Clone(ib.Labels)
	cfg, w := *ib.Config, *ib.Last
	w.Latency = slices.Clone(ib.Last.Latency)
	c.Config, c.Last = &cfg, &w
	if ib.Held != nil {
		h := *ib.Held
		c.Held = &h
	}
	if ib.LastTrip != nil {
		tr := *ib.LastTrip
		c.LastTrip = &tr
	}
	return c
}

// DeepCopies is DeepCopy of each line.
func DeepCopies(ibs []*cbdash.InstanceBreaker) []cbdash.InstanceBreaker {
	out := make([]cbdash.InstanceBreaker, len(ibs))
	for i, ib := range ibs {
		out[i] = DeepCopy(ib)
	}
	return out
}

// Unchanged fails the test for each line of a view (what names it) that
// is no longer deep-equal to its copy taken when the view was published.
func Unchanged(t *testing.T, what string, lines []*cbdash.InstanceBreaker, want []cbdash.InstanceBreaker) {
	t.Helper()
	if len(lines) != len(want) {
		t.Fatalf("%s has %d lines, had %d", what, len(lines), len(want))
	}
	for i, ib := range lines {
		if got := DeepCopy(ib); !reflect.DeepEqual(got, want[i]) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want[i])
			t.Errorf("%s: the line of %s changed:\n got %s\nwant %s", what, want[i].Instance, g, w)
		}
	}
}

// Of is the line of instance in d; it fails the test when there is none.
func Of(t *testing.T, d *cbdash.Dependency, instance string) *cbdash.InstanceBreaker {
	t.Helper()
	for _, ib := range d.PerInstance {
		if ib.Instance == instance {
			return ib
		}
	}
	t.Fatalf("no line of %s in %s", instance, d.DependencyKey)
	return nil
}
