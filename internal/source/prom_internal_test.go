package source

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

const (
	closed   = protocol.StateClosed
	open     = protocol.StateOpen
	halfOpen = protocol.StateHalfOpen
)

// TestOpossumCandidates: the states an opossum breaker may be in after
// the lifetime counts of its open, halfOpen and close events, with and
// without halfOpen counted.
func TestOpossumCandidates(t *testing.T) {
	for _, c := range []struct {
		open, half, close float64
		halfCounted       bool
		want              []string
	}{
		{0, 0, 0, true, []string{closed}},
		{0, 0, 0, false, []string{closed}},
		{1, 0, 0, true, []string{open}},                   // tripped
		{21, 20, 20, true, []string{open}},                // tripped again after 20 cycles
		{21, 20, 11, true, []string{open}},                // half-opens that opened again
		{20, 20, 20, true, []string{closed}},              // every half-open closed
		{40, 40, 20, true, []string{closed, halfOpen}},    // a half-open that opened again
		{1, 1, 0, true, []string{closed, halfOpen}},       // half-open, its trial to come
		{2, 0, 0, true, []string{closed, open, halfOpen}}, // counted from mid-way
		{3, 3, 3, false, []string{closed}},
		{1, 0, 0, false, []string{open}},
		{3, 0, 0, false, []string{open}}, // half-opens unseen, opened again
		{40, 0, 11, false, []string{closed, open}},
		{2, 0, 3, false, []string{closed, open, halfOpen}}, // closed by hand
	} {
		if got := opossumCandidates(c.open, c.half, c.close, c.halfCounted); !slices.Equal(got, c.want) {
			t.Errorf("opossumCandidates(open %v, halfOpen %v, close %v, halfOpen counted %v) = %v, want %v",
				c.open, c.half, c.close, c.halfCounted, got, c.want)
		}
	}
}

// TestOpossumReplay: opossum's state machine followed through the events
// counted between two scrapes.
func TestOpossumReplay(t *testing.T) {
	for _, c := range []struct {
		from                string
		opens, halfs, close int64
		halfCounted         bool
		want                string
		steps               []string
		all                 bool
	}{
		{closed, 1, 0, 0, true, open, []string{open}, true},
		{closed, 1, 1, 1, true, closed, []string{open, halfOpen, closed}, true},
		{open, 1, 1, 0, true, open, []string{halfOpen, open}, true}, // the trial failed
		{halfOpen, 1, 1, 1, true, halfOpen, []string{closed, open, halfOpen}, true},
		{open, 0, 0, 1, false, closed, []string{closed}, true}, // half-open unseen, closed
		{open, 1, 0, 0, false, open, nil, true},                // half-open unseen, opened again
		{closed, 2, 0, 1, false, open, []string{open, closed, open}, true},
		{open, 0, 0, 1, true, closed, []string{closed}, true}, // closed by hand
		{closed, 0, 0, 1, true, closed, nil, false},           // cannot close from closed
		{closed, 0, 1, 0, true, closed, nil, false},           // nor half-open
		{open, 2, 0, 0, true, open, nil, false},               // opens again only from half-open
	} {
		state, steps, all := opossumReplay(c.from, c.opens, c.halfs, c.close, c.halfCounted)
		if state != c.want || !slices.Equal(steps, c.steps) || all != c.all {
			t.Errorf("opossumReplay(%s, open %d, halfOpen %d, close %d, halfOpen counted %v) = %s %v %v, want %s %v %v",
				c.from, c.opens, c.halfs, c.close, c.halfCounted, state, steps, all, c.want, c.steps, c.all)
		}
	}
	state, steps, all := opossumReplay(closed, 5000, 5000, 5000, true)
	if len(steps) != maxReplaySteps || !all || state != steps[len(steps)-1] {
		t.Errorf("a breaker that flapped 5000 times: %s, %d steps, %v; want %d steps, taken as followed", state, len(steps), all, maxReplaySteps)
	}
}

// opossumScrape is one scrape of an opossum breaker in
// TestOpossumState: its lifetime counters, and what cbdash should make of
// it.
type opossumScrape struct {
	counters  map[string]float64
	known     string // the state cbdash showed, for a baseline
	restarted bool   // process_start_time_seconds changed before it
	state     string
	// transitions made, "from>to"
	transitions []string
	// calls rejected while open and while half-open, and successes
	rejOpen, rejHalf, successes int64
}

// c is an opossum breaker's lifetime counters: event, value pairs.
func c(kv ...any) map[string]float64 {
	m := map[string]float64{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = float64(kv[i+1].(int))
	}
	return m
}

// with is base with kv added to its counters.
func with(base map[string]float64, kv ...any) map[string]float64 {
	m := maps.Clone(base)
	for k, v := range c(kv...) {
		m[k] += v
	}
	return m
}

// TestOpossumState follows an opossum breaker through scrapes: its
// baseline, calls that end after the breaker opened (no event), rejects,
// calls that start, the state cbdash showed before a restart of cbdash, a
// restart of the service; with and without halfOpen counted (opossum's
// default: opossum-prometheus counts only events with a listener).
func TestOpossumState(t *testing.T) {
	// Lifetime counts with the state uncertain at a baseline.
	closedOrOpen := c("open", 40, "close", 11, "fire", 500, "success", 300, "failure", 150, "reject", 50)   // no halfOpen
	closedOrHalf := c("open", 40, "halfOpen", 40, "close", 11, "fire", 500, "success", 300, "failure", 150) // halfOpen counted
	neverOpened := c("fire", 10, "success", 10)
	neverOpenedHalf := c("fire", 10, "success", 10, "halfOpen", 0)
	for _, tc := range []struct {
		name    string
		scrapes []opossumScrape
	}{
		{"calls admitted while closed that end while open, no halfOpen", []opossumScrape{
			{counters: closedOrOpen, known: open, state: open},
			// Two slow calls end after the trip: no event, no call started.
			{counters: with(closedOrOpen, "failure", 1, "success", 1), state: open, successes: 1},
			{counters: with(closedOrOpen, "failure", 1, "success", 1, "fire", 3, "reject", 3), state: open, rejOpen: 3},
		}},
		{"calls admitted while closed that end while open, after a trip", []opossumScrape{
			{counters: c("open", 0, "halfOpen", 0, "fire", 5, "failure", 2), state: closed},
			{counters: c("open", 1, "halfOpen", 0, "fire", 6, "failure", 3), state: open, transitions: []string{"closed>open"}},
			{counters: c("open", 1, "halfOpen", 0, "fire", 6, "failure", 4, "success", 1), state: open, successes: 1},
		}},
		{"calls that started with none rejected: closed", []opossumScrape{
			{counters: closedOrOpen, known: open, state: open},
			{counters: with(closedOrOpen, "fire", 3), state: closed}, // in flight
			{counters: with(closedOrOpen, "fire", 3, "reject", 2), state: open, rejOpen: 2},
		}},
		{"calls answered from the cache do not start", []opossumScrape{
			{counters: closedOrOpen, known: open, state: open},
			{counters: with(closedOrOpen, "fire", 5, "cacheHit", 3, "coalesceCacheHit", 2), state: open},
		}},
		{"rejects: not closed", []opossumScrape{
			{counters: closedOrOpen, state: closed},
			{counters: with(closedOrOpen, "fire", 2, "reject", 2), state: open, rejOpen: 2},
		}},
		{"rejects and a call started: half-open with its trial", []opossumScrape{
			{counters: closedOrHalf, state: closed},
			{counters: with(closedOrHalf, "fire", 4, "reject", 3), state: halfOpen, rejHalf: 3},
			{counters: with(closedOrHalf, "fire", 4, "reject", 3, "success", 1, "close", 1), state: closed,
				transitions: []string{"half_open>closed"}, successes: 1},
		}},
		{"one call started: half-open's trial, or closed", []opossumScrape{
			{counters: closedOrHalf, known: halfOpen, state: halfOpen},
			{counters: with(closedOrHalf, "fire", 1), state: halfOpen},
			{counters: with(closedOrHalf, "fire", 3), state: closed},
		}},
		{"the state cbdash showed, when a candidate", []opossumScrape{
			{counters: closedOrHalf, known: halfOpen, state: halfOpen},
			{counters: with(closedOrHalf, "open", 1), state: open, transitions: []string{"half_open>open"}},
		}},
		{"the state cbdash showed, when none", []opossumScrape{
			{counters: closedOrHalf, state: closed},
			{counters: with(closedOrHalf, "open", 1), state: open, transitions: []string{"closed>open"}},
		}},
		{"the state cbdash showed, when not a candidate", []opossumScrape{
			{counters: closedOrHalf, known: open, state: closed},
		}},
		{"the state cbdash showed, when certain", []opossumScrape{
			{counters: c("open", 3, "halfOpen", 2, "close", 2), known: closed, state: open},
		}},
		{"a breaker built open rejects: open", []opossumScrape{
			{counters: neverOpenedHalf, state: closed},
			{counters: with(neverOpenedHalf, "fire", 3, "reject", 3), state: open, rejOpen: 3},
			{counters: with(neverOpenedHalf, "fire", 3, "reject", 3, "halfOpen", 1), state: halfOpen, transitions: []string{"open>half_open"}},
			{counters: with(neverOpenedHalf, "fire", 4, "reject", 3, "halfOpen", 1, "success", 1, "close", 1), state: closed,
				transitions: []string{"half_open>closed"}, successes: 1},
		}},
		{"a breaker built open rejects: open, no halfOpen", []opossumScrape{
			{counters: neverOpened, state: closed},
			{counters: with(neverOpened, "fire", 3, "reject", 3), state: open, rejOpen: 3},
			{counters: with(neverOpened, "fire", 4, "reject", 3, "success", 1, "close", 1), state: closed,
				transitions: []string{"open>closed"}, successes: 1},
		}},
		{"a breaker built open goes half-open, no call before", []opossumScrape{
			{counters: neverOpenedHalf, state: closed},
			{counters: with(neverOpenedHalf, "halfOpen", 1), state: halfOpen, transitions: []string{"open>half_open"}},
		}},
		{"a restart of the service: a counter went down", []opossumScrape{
			{counters: c("open", 1, "fire", 20, "failure", 10), state: open},
			{counters: c("fire", 2, "success", 2), state: closed, successes: 2},
		}},
		{"a restart of the service: process_start_time_seconds changed", []opossumScrape{
			{counters: c("open", 1, "halfOpen", 0, "fire", 20, "failure", 10), state: open},
			{counters: c("open", 1, "halfOpen", 0, "fire", 30, "failure", 20, "success", 5), restarted: true, state: open,
				transitions: []string{"closed>open"}, successes: 5},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &promBreaker{}
			at := time.Unix(1_700_000_000, 0)
			for i, sc := range tc.scrapes {
				if b.prev == nil {
					known := sc.known
					b.known = func() string { return known }
				}
				b.restarted = sc.restarted
				at = at.Add(time.Second)
				w, trs := b.read("x", &promSnap{lib: LibraryOpossum, counter: sc.counters}, at, time.Second)
				var got []string
				for _, tr := range trs {
					got = append(got, tr.From+">"+tr.To)
				}
				if w.State != sc.state || !slices.Equal(got, sc.transitions) || w.Counts.RejectedOpen != sc.rejOpen ||
					w.Counts.RejectedHalfOpen != sc.rejHalf || w.Counts.Successes != sc.successes {
					t.Errorf("scrape %d: %s, transitions %v, rejected %d open %d half-open, %d successes; want %s, %v, %d, %d, %d",
						i, w.State, got, w.Counts.RejectedOpen, w.Counts.RejectedHalfOpen, w.Counts.Successes,
						sc.state, sc.transitions, sc.rejOpen, sc.rejHalf, sc.successes)
				}
			}
		})
	}
}

// TestResilience4jRestart: a restart of the service between two scrapes
// (a counter that went down, or process_start_time_seconds that changed)
// is a baseline: no call counted, the state gauge's state with no
// transition; across anything else the gauge's change is a transition.
func TestResilience4jRestart(t *testing.T) {
	snap := func(state string, calls int) *promSnap {
		return &promSnap{lib: LibraryResilience4j, state: state, counter: c("successful", calls, "failed", 0, "np_counter", 0)}
	}
	for _, restart := range []string{"counter", "start time", "none"} {
		t.Run(restart, func(t *testing.T) {
			b := &promBreaker{}
			at := time.Unix(1_700_000_000, 0)
			b.read("x", snap(open, 100), at, time.Second)
			calls := 150
			if restart == "counter" {
				calls = 5
			}
			b.restarted = restart == "start time"
			w, trs := b.read("x", snap(closed, calls), at.Add(time.Second), time.Second)
			want, wantTrs := int64(0), 0
			if restart == "none" {
				want, wantTrs = 50, 1
			}
			if w.State != closed || w.Counts.Successes != want || len(trs) != wantTrs {
				t.Errorf("%s, %d successes, transitions %s; want closed, %d, %d", w.State, w.Counts.Successes, fmt.Sprint(trs), want, wantTrs)
			}
		})
	}
}
