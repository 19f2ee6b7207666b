package store

import "context"

// InstanceMinuteRounds is how many transactions have written sums of
// instance minutes from the writer's memory to the table (for tests of
// the reads that merge the two).
func InstanceMinuteRounds(s *Store) uint64 { return s.w.imGen.Load() / 2 }

// OnInstanceMinutesCommitted has f called, on the writer's goroutine,
// when a transaction that wrote sums of instance minutes has committed
// and before they leave the writer's memory; f gets whether a reader
// would take that moment for a settled one (it must not). Set it before
// the store is used concurrently.
func OnInstanceMinutesCommitted(s *Store, f func(settled bool)) {
	s.w.testIMCommitted = func() { f(s.w.imGen.Load()%2 == 0) }
}

// OnInstanceHistoryScanned has f called by InstanceHistory between its
// read of the writer's sums and its read of the table. Set it before the
// store is used concurrently.
func OnInstanceHistoryScanned(s *Store, f func()) { s.testIMScanned = f }

// FlushInstanceMinutes has the writer write every sum of instance
// minutes it holds to the table now (as it does over its rounds once
// their minutes have ended).
func FlushInstanceMinutes(s *Store) error { return s.flushInstanceMinutes(context.Background()) }
