package breaker

// RecordFallback counts a fallback that the caller ran itself, outside
// ExecuteWithFallback: for example after a Transport rejected a request or
// returned a 5xx, when the caller serves a cached answer instead. err is
// the fallback's result: nil counts in Totals.FallbackSuccesses, non-nil
// in Totals.FallbackFailures. It records nothing in the sliding window.
// It is safe for concurrent use.
func (b *Breaker) RecordFallback(err error) { b.countFallback(err) }
