package incident_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestDetectorSnapshotsSurviveCloseReopenAndRestore: every incident a
// change or Open() handed out keeps the instances it had, through
// instances joining, the incident closing, a new incident on the same
// dependency taking in the same and other instances, a restored incident
// being updated, and readers appending to what they hold. The restored
// incident's own slice (with spare capacity) is never written.
func TestDetectorSnapshotsSurviveCloseReopenAndRestore(t *testing.T) {
	type held struct {
		what string
		inc  cbdash.Incident
		was  string
	}
	var all []held
	keep := func(what string, incs ...cbdash.Incident) {
		for _, i := range incs {
			all = append(all, held{what, i, strings.Join(i.Instances, ",")})
			_ = append(i.Instances, "reader") // a reader's append
		}
	}
	check := func(when string) {
		t.Helper()
		for _, h := range all {
			if got := strings.Join(h.inc.Instances, ","); got != h.was {
				t.Fatalf("%s: %s had instances %q, now %q", when, h.what, h.was, got)
			}
		}
	}
	d, err := incident.NewDetector(incident.Config{})
	if err != nil {
		t.Fatal(err)
	}
	prev := map[string]string{}
	run := func(steps ...step) {
		t.Helper()
		for _, s := range steps {
			for _, c := range s.apply(d, prev) {
				keep(c.Kind.String(), c.Incident)
			}
			keep("open", d.Open()...)
			check(describeStep(s))
		}
	}
	run(tr(0, "m:open"), tr(1, "c:open"), tr(2, "x:open"), tr(3, "a:open"), tr(4, "e:open"))
	run(tr(10, "a:closed"), tr(11, "c:closed"), tr(12, "e:closed"), tr(13, "m:closed"), tr(14, "x:closed"))
	run(tick(1000)) // past the quiet period: closed
	if len(d.Open()) != 0 {
		t.Fatalf("still open: %+v", d.Open())
	}
	// A new incident on the same dependency, members in another order.
	run(tr(1100, "x:open"), tr(1101, "b:open"), tr(1102, "m:open"), tr(1103, "a:open"), tr(1104, "z:open"), tr(1105, "a:half_open"), tr(1106, "a:open"))
	if got := d.Open(); len(got) != 1 || strings.Join(got[0].Instances, ",") != "a,b,m,x,z" {
		t.Fatalf("second incident: %+v", got)
	}
	// Everything closes; a trip after the quiet period, with no tick in
	// between, closes the second incident and opens a third at once.
	run(tr(1200, "a:closed"), tr(1201, "b:closed"), tr(1202, "m:closed"), tr(1203, "x:closed"), tr(1204, "z:closed"))
	n := len(all)
	run(tr(3000, "b:open"), tr(3001, "q:open"), tr(3002, "a:open"))
	var kinds []string
	for _, h := range all[n:] {
		if h.what != "open" {
			kinds = append(kinds, h.what+":"+h.was)
		}
	}
	if want := []string{"closed:a,b,m,x,z", "opened:b", "updated:b,q", "updated:a,b,q"}; !slices.Equal(kinds, want) {
		t.Fatalf("changes %q, want %q", kinds, want)
	}

	// Restore an incident whose instances have spare capacity, then update it.
	stored := make([]string, 2, 16)
	copy(stored, []string{"b", "d"})
	spare := stored[:cap(stored)]
	d2, _ := incident.NewDetector(incident.Config{})
	d2.Restore([]cbdash.Dependency{{DependencyKey: key, Instances: 4, PerInstance: []*cbdash.InstanceBreaker{
		{Service: key.Service, Breaker: key.Breaker, Instance: "b", State: protocol.StateOpen},
		{Service: key.Service, Breaker: key.Breaker, Instance: "d", State: protocol.StateOpen},
	}}}, []cbdash.Incident{{ID: 9, DependencyKey: key, Start: t0, Open: true, Instances: stored, Opens: 2}}, t0)
	d = d2
	prev = map[string]string{"b": protocol.StateOpen, "d": protocol.StateOpen}
	keep("restored", d.Open()...)
	run(tr(5, "a:open"), tr(6, "c:open"), tr(7, "e:open"), tr(8, "c:half_open"), tr(9, "c:open"))
	if got := d.Open(); len(got) != 1 || got[0].ID != 9 || strings.Join(got[0].Instances, ",") != "a,b,c,d,e" {
		t.Fatalf("restored incident after updates: %+v", got)
	}
	if !slices.Equal(spare, append([]string{"b", "d"}, make([]string, 14)...)) {
		t.Fatalf("the restored incident's own array was written: %q", spare)
	}
}

func describeStep(s step) string {
	if s.tick {
		return "tick"
	}
	return s.tr
}
