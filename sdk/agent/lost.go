package agent

import (
	"encoding/json"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// windowCalls is what a window report counted: every call, admitted or
// rejected.
func windowCalls(w *protocol.Window) int64 {
	return protocol.SatAdd(w.Counts.Admitted, w.Counts.Rejected())
}

// lose records that window report w is dropped: its time and calls join
// the unreported lost spans, extending the span of its breaker that ends
// where w starts (reports of one breaker follow each other, and drops go
// oldest first, so a breaker's drops between two batches are normally one
// span). Spans are bounded: past protocol.MaxLostSpans, every breaker's
// spans are folded into one covering them all (exact in calls, coarser in
// time: it may cover reported seconds between its parts).
func (o *outbox) lose(w *protocol.Window) {
	span := protocol.LostSpan{Breaker: w.Breaker, Start: w.Start, End: w.Start + w.Millis, Calls: windowCalls(w)}
	lost := o.unreported.Lost
	for i := len(lost) - 1; i >= 0; i-- {
		if l := &lost[i]; l.Breaker == span.Breaker && l.End >= span.Start && l.Start <= span.End && fits(*l, span) {
			o.lostBytes -= spanSize(*l)
			*l = joinSpans(*l, span)
			o.lostBytes += spanSize(*l)
			return
		}
	}
	if len(lost) >= protocol.MaxLostSpans {
		o.foldLost()
		for i := range o.unreported.Lost {
			if l := &o.unreported.Lost[i]; l.Breaker == span.Breaker && fits(*l, span) {
				o.lostBytes -= spanSize(*l)
				*l = joinSpans(*l, span)
				o.lostBytes += spanSize(*l)
				return
			}
		}
		if len(o.unreported.Lost) >= protocol.MaxLostSpans {
			return // more than MaxLostSpans breakers over days: counted in Calls only
		}
	}
	o.unreported.Lost = append(o.unreported.Lost, span)
	o.lostBytes += spanSize(span)
}

// foldLost joins the lost spans of each breaker into one where the result
// stays within the protocol's bounds.
func (o *outbox) foldLost() {
	var out []protocol.LostSpan
	size := 0
next:
	for _, l := range o.unreported.Lost {
		for i := range out {
			if out[i].Breaker == l.Breaker && fits(out[i], l) {
				size -= spanSize(out[i])
				out[i] = joinSpans(out[i], l)
				size += spanSize(out[i])
				continue next
			}
		}
		out = append(out, l)
		size += spanSize(l)
	}
	o.unreported.Lost, o.lostBytes = out, size
}

// fits reports whether a and b joined stay a valid span.
func fits(a, b protocol.LostSpan) bool {
	j := joinSpans(a, b)
	return j.End-j.Start <= protocol.MaxLostSpanMillis && j.Calls <= protocol.MaxCount
}

func joinSpans(a, b protocol.LostSpan) protocol.LostSpan {
	return protocol.LostSpan{Breaker: a.Breaker, Start: min(a.Start, b.Start), End: max(a.End, b.End),
		Calls: protocol.SatAdd(a.Calls, b.Calls)}
}

// spanSize is a span's encoded size, with its separating comma.
func spanSize(l protocol.LostSpan) int {
	data, _ := json.Marshal(l) // a plain struct cannot fail
	return len(data) + 1
}
