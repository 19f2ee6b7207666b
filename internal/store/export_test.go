package store

// InstanceMinuteRounds is how many transactions have written sums of
// instance minutes from the writer's memory to the table (for tests of
// the reads that merge the two).
func InstanceMinuteRounds(s *Store) uint64 { return s.w.imGen.Load() }
