// Package batchjson decodes the batches agents send every second without
// reflection, for the collector's hot path: the JSON Go's encoder writes
// for a protocol.Batch of window reports. Decode gives up (ok false) on
// anything else, and the caller then decodes with encoding/json: Decode
// never decides differently from it.
package batchjson

import (
	"strconv"
	"sync"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Decode decodes data as one protocol.Batch: exactly what
// json.Unmarshal would decode into a zero Batch, or ok false when it gives
// up and leaves data to encoding/json. It gives up on any key it does not
// know (or knows in another case), a repeated key, null, a string with an
// escape or a control character, a number that does not fit its field,
// transitions, command results or dropped counts, and trailing data; so
// it has no errors of its own, and what it accepts is judged by the same
// validation as before. data must be valid UTF-8 (the caller checks).
// FuzzDecodeMatchesJSON holds it to encoding/json. Safe for concurrent
// use; the Batch shares nothing with data.
func Decode(data []byte) (b protocol.Batch, ok bool) {
	d := fastDec{data: data}
	ok = d.batch(&b) && d.end()
	return b, ok
}

type fastDec struct {
	data []byte
	pos  int
}

func (d *fastDec) ws() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\r', '\n':
			d.pos++
		default:
			return
		}
	}
}

// end reports whether only whitespace is left.
func (d *fastDec) end() bool {
	d.ws()
	return d.pos == len(d.data)
}

// byte consumes c (after whitespace).
func (d *fastDec) byte(c byte) bool {
	d.ws()
	if d.pos < len(d.data) && d.data[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

// peek returns the next byte after whitespace, 0 at the end.
func (d *fastDec) peek() byte {
	d.ws()
	if d.pos < len(d.data) {
		return d.data[d.pos]
	}
	return 0
}

// rawString returns the bytes of a string without escapes or control
// characters (after whitespace); ok false otherwise.
func (d *fastDec) rawString() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.pos
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			s := d.data[start:d.pos]
			d.pos++
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		d.pos++
	}
	return nil, false
}

// str decodes a string, sharing the common state names.
func (d *fastDec) str() (string, bool) {
	s, ok := d.rawString()
	if !ok {
		return "", false
	}
	switch string(s) { // no allocation: compared, not converted
	case protocol.StateClosed:
		return protocol.StateClosed, true
	case protocol.StateOpen:
		return protocol.StateOpen, true
	case protocol.StateHalfOpen:
		return protocol.StateHalfOpen, true
	}
	return string(s), true
}

// number returns the literal of a JSON number and whether it is an
// integer (no fraction, no exponent); ok false when it is not a number.
func (d *fastDec) number() (lit []byte, integer, ok bool) {
	d.ws()
	start, p := d.pos, d.pos
	n := len(d.data)
	if p < n && d.data[p] == '-' {
		p++
	}
	switch {
	case p < n && d.data[p] == '0':
		p++
	case p < n && d.data[p] >= '1' && d.data[p] <= '9':
		for p < n && d.data[p] >= '0' && d.data[p] <= '9' {
			p++
		}
	default:
		return nil, false, false
	}
	integer = true
	if p < n && d.data[p] == '.' {
		integer = false
		p++
		if p >= n || d.data[p] < '0' || d.data[p] > '9' {
			return nil, false, false
		}
		for p < n && d.data[p] >= '0' && d.data[p] <= '9' {
			p++
		}
	}
	if p < n && (d.data[p] == 'e' || d.data[p] == 'E') {
		integer = false
		p++
		if p < n && (d.data[p] == '+' || d.data[p] == '-') {
			p++
		}
		if p >= n || d.data[p] < '0' || d.data[p] > '9' {
			return nil, false, false
		}
		for p < n && d.data[p] >= '0' && d.data[p] <= '9' {
			p++
		}
	}
	d.pos = p
	return d.data[start:p], integer, true
}

// int64 decodes an integer that fits an int64.
func (d *fastDec) int64() (int64, bool) {
	lit, integer, ok := d.number()
	if !ok || !integer {
		return 0, false
	}
	// Fast path: up to 18 digits cannot overflow.
	neg := lit[0] == '-'
	digits := lit
	if neg {
		digits = lit[1:]
	}
	if len(digits) <= 18 {
		var v int64
		for _, c := range digits {
			v = v*10 + int64(c-'0')
		}
		if neg {
			v = -v
		}
		return v, true
	}
	v, err := strconv.ParseInt(string(lit), 10, 64)
	return v, err == nil
}

func (d *fastDec) uint64() (uint64, bool) {
	lit, integer, ok := d.number()
	if !ok || !integer || lit[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(lit), 10, 64)
	return v, err == nil
}

func (d *fastDec) float64() (float64, bool) {
	lit, integer, ok := d.number()
	if !ok {
		return 0, false
	}
	if integer && len(lit) <= 15 && lit[0] != '-' { // exact in a float64 (and no -0)
		v, ok := (&fastDec{data: lit}).int64()
		return float64(v), ok
	}
	v, err := strconv.ParseFloat(string(lit), 64)
	return v, err == nil
}

// object decodes an object, calling field for every key (each key at most
// once: seen is a bit per field index that field returns; -1 = unknown,
// which gives up).
func (d *fastDec) object(field func(key []byte) (idx int, ok bool)) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	var seen uint64
	for {
		key, ok := d.rawString()
		if !ok || !d.byte(':') {
			return false
		}
		idx, ok := field(key)
		if !ok || idx < 0 || idx > 63 || seen&(1<<idx) != 0 {
			return false
		}
		seen |= 1 << idx
		if d.byte(',') {
			continue
		}
		return d.byte('}')
	}
}

func (d *fastDec) batch(b *protocol.Batch) bool {
	return d.object(func(key []byte) (int, bool) {
		var ok bool
		switch string(key) {
		case "type":
			b.Type, ok = d.str()
			return 0, ok
		case "seq":
			b.Seq, ok = d.uint64()
			return 1, ok
		case "sent_at":
			b.SentAt, ok = d.int64()
			return 2, ok
		case "windows":
			return 3, d.windows(b)
		}
		return -1, false
	})
}

// scratch is where windows decodes a batch's windows and their latency
// histograms before copying them into allocations of exactly their size:
// appending into the batch's own slice would allocate about three times
// the bytes kept (8, 16, then 32 windows for 20) and one histogram
// allocation a window, and these are most of what the collector
// allocates a second. A scratch that grew past maxScratch is dropped, not
// pooled, so the pool stays bounded.
type scratch struct {
	windows []protocol.Window
	latency []int64
	spans   []span // per window: its histogram in latency; start -1 = none
}

type span struct{ start, end int }

const maxScratch = 1024 // windows

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (d *fastDec) windows(b *protocol.Batch) bool {
	if !d.byte('[') {
		return false
	}
	if d.byte(']') {
		b.Windows = []protocol.Window{}
		return true
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	for {
		sc.windows = append(sc.windows, protocol.Window{})
		sc.spans = append(sc.spans, span{start: -1})
		w := &sc.windows[len(sc.windows)-1]
		d.ws()
		if start, lat := d.pos, len(sc.latency); !d.windowInOrder(w, sc) {
			// Not as Go's encoder writes it: from the start, any order.
			d.pos, *w, sc.latency, sc.spans[len(sc.spans)-1] = start, protocol.Window{}, sc.latency[:lat], span{start: -1}
			if !d.window(w, sc) {
				return false
			}
		}
		if d.byte(',') {
			continue
		}
		if !d.byte(']') {
			return false
		}
		break
	}
	b.Windows = make([]protocol.Window, len(sc.windows))
	copy(b.Windows, sc.windows)
	var all []int64 // every histogram of the batch, in one array
	for i, sp := range sc.spans {
		if sp.start < 0 {
			continue
		}
		if all == nil { // non-nil once made, also when empty: "latency":[] is an empty list
			all = make([]int64, len(sc.latency))
			copy(all, sc.latency)
		}
		b.Windows[i].Latency = all[sp.start:sp.end:sp.end]
	}
	return true
}

// release clears the scratch (its windows hold strings) and pools it.
func (sc *scratch) release() {
	if cap(sc.windows) > maxScratch || cap(sc.latency) > maxScratch*protocol.NumLatencyBuckets*2 {
		return
	}
	clear(sc.windows)
	sc.windows, sc.latency, sc.spans = sc.windows[:0], sc.latency[:0], sc.spans[:0]
	scratchPool.Put(sc)
}

// The in-order paths decode an object as Go's encoder writes a struct:
// every key in field order, without spaces, an omitempty field possibly
// missing. They compare each key as a literal instead of scanning it and
// looking it up, and report false on any other shape (a key in another
// order, a space, a repeated key), after which the caller rewinds and
// decodes the object with object: what is accepted is the same.

// lit consumes s when the data continues with it.
func (d *fastDec) lit(s string) bool {
	if len(d.data)-d.pos >= len(s) && string(d.data[d.pos:d.pos+len(s)]) == s {
		d.pos += len(s)
		return true
	}
	return false
}

func (d *fastDec) windowInOrder(w *protocol.Window, sc *scratch) bool {
	var ok bool
	if !d.lit(`{"breaker":`) {
		return false
	}
	if w.Breaker, ok = d.str(); !ok || !d.lit(`,"start":`) {
		return false
	}
	if w.Start, ok = d.int64(); !ok || !d.lit(`,"duration_ms":`) {
		return false
	}
	if w.Millis, ok = d.int64(); !ok || !d.lit(`,"state":`) {
		return false
	}
	if w.State, ok = d.str(); !ok || !d.lit(`,"counts":`) || !d.countsInOrder(&w.Counts) || !d.lit(`,"in_flight":`) {
		return false
	}
	if w.InFlight, ok = d.int64(); !ok {
		return false
	}
	if d.lit(`,"latency":`) && !d.latency(sc) {
		return false
	}
	if !d.lit(`,"latency_sum_ms":`) {
		return false
	}
	if w.LatencySumMs, ok = d.float64(); !ok || !d.lit(`,"headroom":`) || !d.headroomInOrder(&w.Headroom) {
		return false
	}
	if d.lit(`,"forced_until":`) {
		if w.ForcedUntil, ok = d.int64(); !ok {
			return false
		}
	}
	return d.lit("}")
}

var countKeys = [...]string{`{"admitted":`, `,"successes":`, `,"failures":`, `,"errors":`, `,"timeouts":`, `,"panics":`,
	`,"slow":`, `,"ignored":`, `,"rejected_open":`, `,"rejected_half_open_full":`, `,"rejected_forced_open":`,
	`,"rejected_bulkhead":`, `,"fallback_successes":`, `,"fallback_failures":`}

func (d *fastDec) countsInOrder(c *protocol.Counts) bool {
	ps := [...]*int64{&c.Admitted, &c.Successes, &c.Failures, &c.Errors, &c.Timeouts, &c.Panics, &c.Slow, &c.Ignored,
		&c.RejectedOpen, &c.RejectedHalfOpen, &c.RejectedForced, &c.RejectedBulkhead, &c.FallbackSuccess, &c.FallbackFailure}
	for i, k := range countKeys {
		var ok bool
		if !d.lit(k) {
			return false
		}
		if *ps[i], ok = d.int64(); !ok {
			return false
		}
	}
	if d.lit(`,"misuse":`) {
		var ok bool
		if c.Misuse, ok = d.int64(); !ok {
			return false
		}
	}
	if d.lit(`,"rejected_ramp":`) {
		var ok bool
		if c.RejectedRamp, ok = d.int64(); !ok {
			return false
		}
	}
	return d.lit("}")
}

func (d *fastDec) headroomInOrder(h *protocol.Headroom) bool {
	var ok bool
	if !d.lit(`{"calls":`) {
		return false
	}
	if h.Calls, ok = d.int64(); !ok || !d.lit(`,"failures":`) {
		return false
	}
	if h.Failures, ok = d.int64(); !ok || !d.lit(`,"slow":`) {
		return false
	}
	if h.Slow, ok = d.int64(); !ok || !d.lit(`,"minimum_calls":`) {
		return false
	}
	if h.MinimumCalls, ok = d.int64(); !ok || !d.lit(`,"failure_rate":`) {
		return false
	}
	if h.FailureRate, ok = d.float64(); !ok || !d.lit(`,"failure_rate_threshold":`) {
		return false
	}
	if h.FailureRateThreshold, ok = d.float64(); !ok || !d.lit(`,"slow_call_rate":`) {
		return false
	}
	if h.SlowCallRate, ok = d.float64(); !ok || !d.lit(`,"slow_call_rate_threshold":`) {
		return false
	}
	if h.SlowCallRateThreshold, ok = d.float64(); !ok {
		return false
	}
	return d.lit("}")
}

func (d *fastDec) window(w *protocol.Window, sc *scratch) bool {
	return d.object(func(key []byte) (int, bool) {
		var ok bool
		switch string(key) {
		case "breaker":
			w.Breaker, ok = d.str()
			return 0, ok
		case "start":
			w.Start, ok = d.int64()
			return 1, ok
		case "duration_ms":
			w.Millis, ok = d.int64()
			return 2, ok
		case "state":
			w.State, ok = d.str()
			return 3, ok
		case "counts":
			return 4, d.counts(&w.Counts)
		case "in_flight":
			w.InFlight, ok = d.int64()
			return 5, ok
		case "latency":
			return 6, d.latency(sc)
		case "latency_sum_ms":
			w.LatencySumMs, ok = d.float64()
			return 7, ok
		case "headroom":
			return 8, d.headroom(&w.Headroom)
		case "forced_until":
			w.ForcedUntil, ok = d.int64()
			return 9, ok
		}
		return -1, false
	})
}

// latency decodes the last window's histogram into the scratch.
func (d *fastDec) latency(sc *scratch) bool {
	if !d.byte('[') {
		return false
	}
	start := len(sc.latency)
	sp := &sc.spans[len(sc.spans)-1]
	if d.byte(']') {
		*sp = span{start, start}
		return true
	}
	for {
		v, ok := d.int64()
		if !ok {
			return false
		}
		sc.latency = append(sc.latency, v)
		if d.byte(',') {
			continue
		}
		*sp = span{start, len(sc.latency)}
		return d.byte(']')
	}
}

func (d *fastDec) counts(c *protocol.Counts) bool {
	if d.peek() != '{' {
		return false
	}
	fields := [...]struct {
		name string
		p    *int64
	}{
		{"admitted", &c.Admitted}, {"successes", &c.Successes}, {"failures", &c.Failures}, {"errors", &c.Errors},
		{"timeouts", &c.Timeouts}, {"panics", &c.Panics}, {"slow", &c.Slow}, {"ignored", &c.Ignored},
		{"rejected_open", &c.RejectedOpen}, {"rejected_half_open_full", &c.RejectedHalfOpen},
		{"rejected_forced_open", &c.RejectedForced}, {"rejected_bulkhead", &c.RejectedBulkhead},
		{"fallback_successes", &c.FallbackSuccess}, {"fallback_failures", &c.FallbackFailure}, {"misuse", &c.Misuse},
		{"rejected_ramp", &c.RejectedRamp},
	}
	next := 0 // Go writes the fields in order: look there first
	return d.object(func(key []byte) (int, bool) {
		for i := range fields {
			j := (next + i) % len(fields)
			if fields[j].name == string(key) {
				var ok bool
				*fields[j].p, ok = d.int64()
				next = j + 1
				return j, ok
			}
		}
		return -1, false
	})
}

func (d *fastDec) headroom(h *protocol.Headroom) bool {
	return d.object(func(key []byte) (int, bool) {
		var ok bool
		switch string(key) {
		case "calls":
			h.Calls, ok = d.int64()
			return 0, ok
		case "failures":
			h.Failures, ok = d.int64()
			return 1, ok
		case "slow":
			h.Slow, ok = d.int64()
			return 2, ok
		case "minimum_calls":
			h.MinimumCalls, ok = d.int64()
			return 3, ok
		case "failure_rate":
			h.FailureRate, ok = d.float64()
			return 4, ok
		case "failure_rate_threshold":
			h.FailureRateThreshold, ok = d.float64()
			return 5, ok
		case "slow_call_rate":
			h.SlowCallRate, ok = d.float64()
			return 6, ok
		case "slow_call_rate_threshold":
			h.SlowCallRateThreshold, ok = d.float64()
			return 7, ok
		}
		return -1, false
	})
}
