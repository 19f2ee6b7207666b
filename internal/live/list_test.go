package live

import (
	"maps"
	"slices"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestAnInstancesListHoldsItsBreakers: the list bump walks on every
// batch holds exactly the instance's breakers as hellos add and drop
// them (a dropped breaker left in it would be marked dirty in a
// dependency it left).
func TestAnInstancesListHoldsItsBreakers(t *testing.T) {
	t.Parallel()
	l, clk := newTestLive(t)
	k := Key{"api", "a"}
	hello := func(names ...string) {
		h := testHello("api", "a", protocol.BreakerConfig{}, nil)
		h.Breakers = nil
		for _, n := range names {
			h.Breakers = append(h.Breakers, protocol.BreakerConfig{Name: n})
		}
		l.Hello(h, 0, nil, clk.Now(), nil)
		l.mu.Lock()
		defer l.mu.Unlock()
		inst := l.instances[k]
		var got, want []string
		for _, ib := range inst.list {
			got = append(got, ib.dep.key.Breaker)
		}
		for name, ib := range inst.breakers {
			if !slices.Contains(inst.list, ib) {
				t.Errorf("hello %v: %s is not in the list", names, name)
			}
			want = append(want, name)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) || !slices.Equal(want, slices.Sorted(slices.Values(names))) {
			t.Errorf("hello %v: list %v, breakers %v", names, got, want)
		}
	}
	hello("db", "cache", "queue")
	hello("cache", "queue")
	hello("queue", "db", "mail")
	hello("mail")
	hello("mail", "db", "cache", "queue")
}

// BenchmarkBumpAnInstanceOf20Breakers marks an instance's 20 breakers
// as bump does on every batch, walking the map (as before) and the list,
// side by side in one run.
func BenchmarkBumpAnInstanceOf20Breakers(b *testing.B) {
	l, clk := newTestLive(b)
	h := testHello("api", "a", protocol.BreakerConfig{}, nil)
	h.Breakers = nil
	for i := range 20 {
		h.Breakers = append(h.Breakers, protocol.BreakerConfig{Name: "dep-" + string(rune('a'+i))})
	}
	l.Hello(h, 0, nil, clk.Now(), nil)
	inst := l.instances[Key{"api", "a"}]
	mark := func(ib *ibreaker) {
		ib.fresh = false
		if !ib.dirty {
			ib.dirty = true
			ib.dep.dirty = append(ib.dep.dirty, ib)
		}
	}
	reset := func() {
		for _, ib := range inst.list {
			ib.dirty = false
			ib.dep.dirty = ib.dep.dirty[:0]
		}
	}
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			for _, ib := range inst.breakers {
				mark(ib)
			}
			reset()
		}
	})
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			l.bump(inst)
			reset()
		}
	})
}

// TestTheStatesCountedByRankAreThoseOfTheirRank: countMembers counts the
// five states by their rank, and names them back from it (a member's
// slot keeps its rank, its state read from its line for no rank).
func TestTheStatesCountedByRankAreThoseOfTheirRank(t *testing.T) {
	for r, s := range rankStates {
		if got := stateRank(s); got != r {
			t.Errorf("rankStates[%d] = %s, of rank %d", r, s, got)
		}
	}
	var c, bySlot stateCounts
	for _, s := range []string{"open", "closed", "closed", "half_open", "forced_open", "forced_closed", "unknown", ""} {
		c.add(int32(stateRank(s)), s)
		slot := memberSlot{rank: int32(stateRank(s)), line: &cbdash.InstanceBreaker{State: s}}
		if got := slot.state(); got != s {
			t.Errorf("the slot of a member %q says %q", s, got)
		}
		bySlot.addMember(&slot)
	}
	want := map[string]int{"open": 1, "closed": 2, "half_open": 1, "forced_open": 1, "forced_closed": 1, "unknown": 1, "": 1}
	for _, c := range []stateCounts{c, bySlot} {
		m := map[string]int{}
		c.into(m)
		if !maps.Equal(m, want) {
			t.Errorf("counted %v, want %v", m, want)
		}
	}
}

// BenchmarkCountByState counts 1,000 members' states (one in ten open)
// by name, as countMembers did (a string comparison per state seen so
// far), and by rank, side by side in one run.
func BenchmarkCountByState(b *testing.B) {
	slots := make([]memberSlot, 1000)
	names := make([]string, len(slots)) // the slots' states
	for i := range slots {
		s := protocol.StateClosed
		if i%10 == 0 {
			s = protocol.StateOpen
		}
		slots[i], names[i] = memberSlot{rank: int32(stateRank(s))}, s
	}
	b.Run("name", func(b *testing.B) {
		for b.Loop() {
			var states [8]string
			var n [8]int
			for i := range slots {
				for j := range states {
					if states[j] == names[i] {
						n[j]++
						break
					}
					if states[j] == "" {
						states[j], n[j] = names[i], 1
						break
					}
				}
			}
		}
	})
	b.Run("rank", func(b *testing.B) {
		for b.Loop() {
			var c stateCounts
			for i := range slots {
				c.add(slots[i].rank, names[i])
			}
		}
	})
}
