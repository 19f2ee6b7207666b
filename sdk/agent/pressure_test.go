package agent_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// pressureFixture is an agent with a 64 KiB buffer reporting n breakers
// (payments and n-1 more), each called every second.
type pressureFixture struct {
	*fixture
	breakers []*breaker.Breaker
}

func newPressureFixture(t *testing.T, n int) *pressureFixture {
	t.Helper()
	f := newFixture(t, fixtureOptions{noStart: true, breaker: breaker.Config{MinimumCalls: 1000},
		agent: func(c *agent.Config) { c.BufferBytes = 64 << 10 }})
	p := &pressureFixture{fixture: f, breakers: []*breaker.Breaker{f.b}}
	for i := 1; i < n; i++ {
		b, err := breaker.New(fmt.Sprintf("dependency-%03d", i), breaker.Config{Clock: f.clock, MinimumCalls: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.agent.Register(b); err != nil {
			t.Fatal(err)
		}
		p.breakers = append(p.breakers, b)
	}
	f.start(t)
	return p
}

// second makes every breaker's calls of one second and ticks.
func (p *pressureFixture) second(i int) {
	for j, b := range p.breakers {
		calls(b, 1+(i+j)%5, false)
		calls(b, (i*j)%3, true)
	}
	p.tick()
}

// calls is what breaker b counted: every call, admitted or rejected.
func totalCalls(b *breaker.Breaker) int64 {
	t := b.Snapshot().Totals
	return int64(t.Admitted + t.RejectedOpen + t.RejectedHalfOpenFull + t.RejectedForcedOpen + t.RejectedBulkhead)
}

func storedCalls(c protocol.Counts) int64 { return c.Admitted + c.Rejected() }

func TestA60SecondFreezeWithA64KiBBufferLosesResolutionNotCounts(t *testing.T) {
	p := newPressureFixture(t, 40)
	for i := range 5 {
		p.second(i)
	}
	waitFor(t, 5*time.Second, "the first reports", func() bool { return len(p.col.windows("payments")) > 0 })
	p.col.freeze()
	for i := 5; i < 65; i++ {
		p.second(i)
		if s := p.agent.Stats(); s.BufferedBytes > 64<<10 {
			t.Fatalf("second %d: %d bytes buffered, bound %d", i, s.BufferedBytes, 64<<10)
		}
	}
	frozen := p.agent.Stats()
	p.col.thaw()
	for i := 65; i < 70; i++ {
		p.second(i)
	}
	p.close(t)
	if frozen.Dropped.Merged == 0 {
		t.Fatalf("dropped %+v during the freeze: want merged reports (the buffer was too small for a minute)", frozen.Dropped)
	}
	d := p.agent.Stats().Dropped
	if d.Windows != 0 || d.Transitions != 0 || d.Batches != 0 || d.Calls != 0 || len(d.Lost) != 0 {
		t.Fatalf("dropped %+v: want merges only", d)
	}
	for _, b := range p.breakers {
		got, lat := p.col.sum(b.Name())
		if want := totalCalls(b); storedCalls(got) != want {
			t.Errorf("%s: %d calls stored, %d made", b.Name(), storedCalls(got), want)
		}
		var ended int64
		for _, n := range lat {
			ended += n
		}
		if ended != got.Successes+got.Failures+got.Ignored {
			t.Errorf("%s: histograms hold %d calls, counts %d ended", b.Name(), ended, got.Successes+got.Failures+got.Ignored)
		}
	}
	var longest int64
	for _, w := range p.col.windows("payments") {
		longest = max(longest, w.Millis)
	}
	if longest < 10_000 {
		t.Fatalf("longest stored report %d ms: want merged reports of many seconds", longest)
	}
}

func TestABufferTooSmallEvenForOneReportPerBreakerReportsExactlyWhatWasLost(t *testing.T) {
	p := newPressureFixture(t, 70) // one report of each is more than the pending share of 64 KiB
	for i := range 3 {
		p.second(i)
	}
	waitFor(t, 5*time.Second, "the first reports", func() bool { return len(p.col.windows("payments")) > 0 })
	p.col.freeze()
	for i := 3; i < 63; i++ {
		p.second(i)
		if s := p.agent.Stats(); s.BufferedBytes > 64<<10 {
			t.Fatalf("second %d: %d bytes buffered, bound %d", i, s.BufferedBytes, 64<<10)
		}
	}
	p.col.thaw()
	for i := 63; i < 66; i++ {
		p.second(i)
	}
	p.close(t)

	lost := map[string][]protocol.LostSpan{}
	var reported protocol.Dropped
	for _, b := range p.col.batches() {
		if d := b.Dropped; d != nil {
			reported.Add(*d)
			for _, l := range d.Lost {
				lost[l.Breaker] = append(lost[l.Breaker], l)
			}
		}
	}
	total := p.agent.Stats().Dropped
	if total.Windows == 0 || reported.Windows != total.Windows || reported.Calls != total.Calls {
		t.Fatalf("batches reported %d windows / %d calls dropped, the agent counted %d / %d: want drops, all reported",
			reported.Windows, reported.Calls, total.Windows, total.Calls)
	}
	var lostCalls int64
	for _, b := range p.breakers {
		got, _ := p.col.sum(b.Name())
		var calls int64
		for _, l := range lost[b.Name()] {
			calls += l.Calls
		}
		lostCalls += calls
		if want := totalCalls(b); storedCalls(got)+calls != want {
			t.Errorf("%s: %d calls stored + %d reported lost, %d made", b.Name(), storedCalls(got), calls, want)
		}
		assertTiles(t, b.Name(), p.col.windows(b.Name()), lost[b.Name()])
	}
	if lostCalls != total.Calls || lostCalls == 0 {
		t.Fatalf("lost spans hold %d calls, dropped.calls says %d", lostCalls, total.Calls)
	}
}

// assertTiles checks that the stored reports and the lost spans of one
// breaker cover its time without a hole or an overlap: exactly which
// seconds were lost.
func assertTiles(t *testing.T, name string, ws []protocol.Window, lost []protocol.LostSpan) {
	t.Helper()
	type span struct{ start, end int64 }
	var all []span
	for _, w := range ws {
		all = append(all, span{w.Start, w.Start + w.Millis})
	}
	for _, l := range lost {
		all = append(all, span{l.Start, l.End})
	}
	slices.SortFunc(all, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	for i := 1; i < len(all); i++ {
		if all[i].start != all[i-1].end {
			t.Fatalf("%s: reports and lost spans %v do not tile time at %d", name, all, i)
		}
	}
}
