// Package store is cbdash's SQLite storage (modernc.org/sqlite, WAL): the
// services, instances and breakers agents declare, their transitions, their
// window reports at three resolutions, the operator command audit log, the
// agent tokens, the dashboard's users with their sessions, API tokens and
// account log, incidents with their notes and the configuration changes
// they show, alert rules with their delivery log, and holds (operator
// trips kept as desired state, the instance breakers each covered and what
// they counted while held).
//
// Migrations are embedded and each runs in its own transaction; their
// numbers are ranges owned by area: 00001-00009 instances, windows,
// commands, agent tokens, the store's health probe (00005), data gaps
// (00006), misuse counts (00007) and the per-instance history (00008);
// 00010-00019 users and accounts; 00020-00029 incidents, alerts (their
// firing state: 00023) and configuration changes; 00030-00039 holds. The
// 00001-00009 range is now full: the store's next migrations take 00040+.
//
// Times the caller does not pass (creation of users, tokens and alert
// rules, token use, the sweep of expired sessions) are read from
// Options.Clock, the server's one clock.
//
// # Writes
//
// One writer goroutine owns every write. Callers enqueue an operation on a
// bounded queue and wait until the transaction that holds it has committed;
// the writer group-commits every operation waiting in the queue (up to a
// limit) in one transaction, each inside its own SAVEPOINT so that one
// failing operation does not fail the others. This is what makes 20,000
// window reports a second affordable: a second of a large fleet is a handful
// of transactions, not thousands. Reads use a separate pool of read-only
// connections and never wait for the writer (WAL).
//
// # History layout
//
// Window reports are stored summed over the instances of a dependency
// (service + breaker), not per instance: a fleet of 1,000 instances with 20
// breakers sends 20,000 reports a second, which per instance would be 1.7
// billion rows a day at second resolution; per dependency it is one row per
// dependency and second (17 million rows a day for 200 dependencies, before
// the 24 h retention deletes them). The price is that history cannot be
// filtered by instance: per-instance state is kept as the last known state
// (Instances) and as transitions (Transitions, with an instance filter),
// and History refuses HistoryQuery.Instance with cbdash.ErrInvalid.
//
// What the dependency page needs per instance is kept apart and coarser:
// one row per instance breaker and minute (InstanceHistory) with the
// minute's calls, failures, slow calls, rejections and worst state, eight
// integers keyed by the dependency's and the instance's ids (a hello that
// stops declaring a breaker keeps its history), written in the batch's
// transaction (so exactly once) and kept for Retention.InstanceMinutes
// (24 h by default): 1,000 instances with 20 breakers make 29 million rows
// a day, tens of bytes each (small integers in a WITHOUT ROWID B-tree).
//
// Seconds are rolled into minutes and minutes into hours by Compact with
// exact sums and merged histograms. A report that arrives for a second that
// was already rolled up (an agent resending after a reconnect) is merged
// into the second, minute and, if needed, hour rows in the same
// transaction, so roll-ups stay exact whatever the arrival order. History
// reads a coarse level where it is complete and the finer levels after it,
// so recent buckets are never missing.
//
// # Durability
//
// SaveBatch returns only after COMMIT, and a batch's sequence-number
// bookkeeping is in the same transaction as its data, so an acknowledged
// batch survives the process being killed and is stored exactly once. The
// writer connection uses synchronous=FULL, so acknowledged batches also
// survive a power loss; the group commit keeps that to one fsync per
// transaction.
//
// All times are stored as Unix milliseconds (UTC). Every method of Store is
// safe for concurrent use.
package store
