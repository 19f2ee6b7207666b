package source

import (
	"time"
)

// hostSlots recovers the counts of a Turbine stream that merges the
// streams of hystrix-go hosts. Turbine writes the merged record again
// after each host's record (its sums then differ from the record before
// by that host's change alone), and each hystrix-go host writes once a
// second, at a phase of the second of its own. So the reads of a merged
// stream fall at as many phases of the second as there are hosts, and a
// read at a host's phase is that host's read: its count is the host's
// last count plus the change of the sums. Each host's counts are then
// recovered as a single host's are (rollingCounts, with hystrix-go's
// oldest bucket), on cbdash's clock (Turbine sums the hosts'
// currentTime), their sum being the cluster's.
//
// It gives up (ok false, and the caller reads the sums as one count)
// when the reads fall at more phases than there are hosts: Turbine
// merging several hosts' records into one write, or hosts writing at
// moving phases.
type hostSlots struct {
	hosts int
	slots []hostSlot
	last  [nRolled]int64 // the sums at the previous read
	given bool           // gave up
}

type hostSlot struct {
	phase  time.Duration // of the second, of its reads
	counts [nRolled]int64
	rolled rollingCounts
}

// slotTolerance is how far from a host's phase its reads may fall.
const slotTolerance = 150 * time.Millisecond

// read takes the sums of a merged record read at now, standing for hosts
// hosts of which open are open, open before at the previous read.
func (s *hostSlots) read(now time.Time, l rollingLayout, vals [nRolled]int64, hosts int, open, openBefore float64) (out [nRolled]int64, ok bool) {
	if s.given {
		return out, false
	}
	if hosts != s.hosts {
		// The first read, or a host came or went: a baseline, the counts
		// shared evenly among the hosts as they are seen.
		*s = hostSlots{hosts: hosts, last: vals}
		return out, true
	}
	phase := time.Duration(now.UnixNano() % int64(l.bucket))
	var slot *hostSlot
	for i := range s.slots {
		d := (phase - s.slots[i].phase + l.bucket) % l.bucket
		if d < slotTolerance || l.bucket-d < slotTolerance {
			slot = &s.slots[i]
			break
		}
	}
	if slot == nil {
		if len(s.slots) == hosts {
			s.given = true
			return out, false
		}
		s.slots = append(s.slots, hostSlot{phase: phase})
		slot = &s.slots[len(s.slots)-1]
		// The host's share of the sums before this read, taken as its
		// first read: only the change of this one is new.
		for i, v := range s.last {
			slot.counts[i] = v / int64(hosts)
		}
		slot.rolled.read(now, l, slot.counts, rollingHints{})
	}
	for i := range vals {
		slot.counts[i] = max(slot.counts[i]+vals[i]-s.last[i], 0)
	}
	s.last = vals
	h := rollingHints{}
	if open < openBefore && l.keepsOldest {
		// a host closed: this one, whose change the read is; hystrix-go
		// clears a circuit's counts as it closes.
		h.cleared = slot.rolled.started
	}
	return slot.rolled.read(now, l, slot.counts, h), true
}

func (s *hostSlots) clone() hostSlots {
	c := *s
	c.slots = append([]hostSlot(nil), s.slots...)
	for i := range c.slots {
		c.slots[i].rolled = s.slots[i].rolled.clone()
	}
	return c
}
