package protocol_test

import (
	"fmt"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// helloOf is a valid hello declaring n breakers dep-000 .. dep-(n-1).
func helloOf(n int) protocol.Hello {
	hello := validHello()
	base := hello.Breakers[0]
	hello.Breakers = make([]protocol.BreakerConfig, n)
	for i := range hello.Breakers {
		hello.Breakers[i] = base
		hello.Breakers[i].Name = fmt.Sprintf("dep-%03d", i)
	}
	return hello
}

// windowsFor is a batch with one valid window for each name, nothing else.
func windowsFor(names ...string) *protocol.Batch {
	b := validBatch()
	w := b.Windows[0]
	b.Transitions, b.CommandResults, b.Windows = nil, nil, nil
	for _, n := range names {
		w.Breaker = n
		b.Windows = append(b.Windows, w)
	}
	return &b
}

// TestBatchValidateDeclaredAtEveryPosition: on both sides of the list /
// map threshold (and for a hello declaring nothing), a window is judged by
// its name, not by its place: a declared name at another index than the
// hello's (shifted, repeated, fewer windows than breakers) passes; a name
// undeclared at any index (including a near miss of the name at that very
// index) is refused with the message naming that window; transitions and
// lost spans naming an undeclared breaker are refused as before.
func TestBatchValidateDeclaredAtEveryPosition(t *testing.T) {
	for _, n := range []int{0, 1, 2, 31, 32, 33, 64, 200} {
		hello := helloOf(n)
		var names []string
		for i := range n {
			names = append(names, hello.Breakers[i].Name)
		}
		if n > 0 {
			shifted := append(append([]string{}, names[1:]...), names[0])
			if err := windowsFor(shifted...).Validate(&hello, now); err != nil {
				t.Fatalf("%d breakers, shifted by one: %v", n, err)
			}
			if err := windowsFor(names[n-1], names[n-1], names[0]).Validate(&hello, now); err != nil {
				t.Fatalf("%d breakers, a few out of place and repeated: %v", n, err)
			}
		}
		for i := range max(n, 1) {
			for _, bad := range []string{"undeclared", fmt.Sprintf("dep-%03d", i) + "x", fmt.Sprintf("dep-%03d", i)[:6], fmt.Sprintf("dep-%03d", n)} {
				ws := append([]string{}, names...)
				if len(ws) == 0 {
					ws = []string{bad}
				} else {
					ws[i] = bad
				}
				checkErr(t, windowsFor(ws...).Validate(&hello, now), fmt.Sprintf("windows[%d].breaker %q was not declared in hello", i, bad))
			}
		}
		b := windowsFor(names...)
		b.Transitions = []protocol.Transition{validBatch().Transitions[0]}
		b.Transitions[0].Breaker = fmt.Sprintf("dep-%03d", n)
		checkErr(t, b.Validate(&hello, now), fmt.Sprintf("transitions[0].breaker %q was not declared in hello", b.Transitions[0].Breaker))
		if n > 0 {
			b.Transitions[0].Breaker = names[n-1]
			checkErr(t, b.Validate(&hello, now), "")
		}
		b.Dropped = &protocol.Dropped{Windows: 1, Lost: []protocol.LostSpan{{Breaker: "nope", Start: now - 2000, End: now - 1000, Calls: 1}}}
		checkErr(t, b.Validate(&hello, now), `dropped.lost[0].breaker "nope" was not declared in hello`)
		if err := b.Validate(nil, now); err != nil {
			t.Fatalf("%d breakers, no hello: any name passes: %v", n, err)
		}
	}
}
