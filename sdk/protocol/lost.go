package protocol

import "fmt"

// validateLost checks d.Lost: at most MaxLostSpans spans, each of a
// declared breaker (checkBreaker), with End after Start by at most
// MaxLostSpanMillis, times not in the future of ref and calls within
// 0..MaxCount.
func validateLost(d *Dropped, checkBreaker func(field, name string) error, ref int64) error {
	if d == nil {
		return nil
	}
	if len(d.Lost) > MaxLostSpans {
		return invalid("dropped.lost has %d spans (at most %d)", len(d.Lost), MaxLostSpans)
	}
	for i, l := range d.Lost {
		p := fmt.Sprintf("dropped.lost[%d]", i)
		if err := checkBreaker(p+".breaker", l.Breaker); err != nil {
			return err
		}
		if err := checkTime(p+".start", l.Start, ref); err != nil {
			return err
		}
		if err := checkTime(p+".end", l.End, ref); err != nil {
			return err
		}
		if l.End <= l.Start || l.End-l.Start > MaxLostSpanMillis {
			return invalid("%s.end must be after start by at most %d ms (got %d)", p, int64(MaxLostSpanMillis), l.End-l.Start)
		}
		if l.Calls < 0 || l.Calls > MaxCount {
			return invalid("%s.calls must be within 0..%d (got %d)", p, int64(MaxCount), l.Calls)
		}
	}
	return nil
}
