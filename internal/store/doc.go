// Package store is cbdash's storage, on SQLite (modernc.org/sqlite, WAL;
// the default: a file path) or on PostgreSQL (github.com/jackc/pgx/v5; a
// postgres:// URL given to Open): the services, instances and breakers agents declare, their transitions, their
// window reports at three resolutions, the operator command audit log, the
// agent tokens, the dashboard's users with their sessions, API tokens and
// account log, incidents with their notes and the configuration changes
// they show, alert rules with their delivery log, and holds (operator
// trips kept as desired state, the instance breakers each covered and what
// they counted while held).
//
// # Two backends
//
// Open picks the backend from its DSN: postgres:// or postgresql:// is
// PostgreSQL, anything else a SQLite path. Both are the same *Store with
// the same methods, the same single writer with group commit and
// savepoints, the same acks after COMMIT and (instance, seq) dedup. The
// SQL is written once, with $1, $2... placeholders (both drivers bind them
// by position; modernc.org/sqlite takes $N for the N-th argument), upserts
// (ON CONFLICT ... DO UPDATE with the target table's columns qualified)
// and RETURNING for new ids; a query built at run time numbers its
// placeholders with params. dialect.go is the one place that differs: it
// spells the few constructs the backends do not share (dialect.greatest
// and least: SQLite's two-argument max/min, PostgreSQL's GREATEST/LEAST;
// jsonEach: json_each or jsonb_array_elements_text; lowerHex: hex or
// encode), which a query takes from the dialect as it is built, passes Go
// bools as 0/1, maps a PostgreSQL unique violation to
// cbdash.ErrConflict, and classifies PostgreSQL errors for Transient
// (connection lost or refused, the server shutting down, out of disk,
// serialization failures and deadlocks are transient: the collector then
// stops acking, as for a full disk, and Writable fails until a write
// commits again, or Probe succeeds). PostgreSQL connections go through
// pgx's database/sql driver (pgx/v5/stdlib), not pgxpool, so both
// backends share every query and scan; database/sql reconnects after the
// server drops a connection. History reads use a REPEATABLE READ read-only
// transaction on PostgreSQL, so one query sees one snapshot as on SQLite.
// Several processes may share one PostgreSQL schema (several
// collectors): see Several writers.
//
// # Several writers
//
// On PostgreSQL every group transaction first takes the schema's
// transaction-level advisory lock (pg_advisory_xact_lock on
// hashtext(current_schema())), in one of two modes (dialect.beginGroup):
//
//   - shared, for a group of batches and hellos (op.shared: SaveBatch, a
//     Stream's batches, SaveHello, and the writes of the buffered
//     instance minutes), and for incidents made and rewritten
//     (CreateIncident, UpdateIncident) and the leaders' marks
//     (SetLeaderMark), whose rows are made once by a unique key,
//     rewritten whole, or moved forward only (leaderShared): the batch
//     groups of all the processes run at the same time;
//   - exclusive, for every other group (holds, commands, users,
//     tokens, incident notes, alerts, schedules, the probe,
//     Compact with its roll-ups and retention: whatever reads and then
//     writes rows other processes write), which runs alone, against
//     every other group of every process.
//
// A group holds one mode: the writer commits a group's ops that need the
// exclusive lock first, then its batches, as two transactions, and an op
// that needs the exclusive lock never joins a batch group (join). What a batch group
// writes is safe beside another process's batch group:
//
//   - History rows are the writer's own: windows_second, windows_minute
//     and windows_hour have a writer column in their key (dep_id, start,
//     writer), and each store writes rows of its id only (writer.id: a
//     number of the store_writers sequence taken at Open; 0 on SQLite,
//     one writer per file). Two collectors reporting into the same
//     dependency-second write two rows, and a writer's row cache stays
//     valid across groups. Readers combine the rows of one bucket
//     (combiner): at second level everything adds up (each row counts
//     its writer's instances), at minute and hour level counts and
//     histograms add up and in-flight calls and open instances take the
//     maximum (as a roll-up does). Compact (exclusive) rolls the seconds
//     of every writer into minute rows of writer 0 and minutes into
//     hour rows of writer 0; a late second (before the watermark) is
//     merged into its writer's own minute and hour rows, with the
//     in-flight calls and open instances of the second summed over all
//     writers' rows. The watermarks are read again in each group under
//     the lock: Compact, exclusive, cannot move them while a batch
//     group that read them runs.
//   - Seqs, the dedup: a batch group locks the instance_runs rows of its
//     agents' processes in one statement at its start, in order of
//     (instance, start) (lockRuns; an instance the writer does not know
//     yet: by its op, lockRun) and checks each batch's seq against the
//     last seq read under the lock, so an agent failing over with
//     batches in two collectors' queues has each stored once: the second
//     group waits for the first's COMMIT and finds its batch a
//     duplicate. Acks still come after COMMIT.
//   - Per-instance rows (instances' last-seen times, breakers' states,
//     command targets, instance_runs) are written after that lock, and
//     only by the collector serving the instance (another only during a
//     failover's overlap, then in the seq rows' order); transitions,
//     shadow transitions and data gaps are appended; instance_minutes
//     are additive upserts written in key order; dependencies, services
//     and instances met by a batch are read, and inserted only when
//     missing (an upsert would lock a row every writer shares).
//   - A hello writes its instance's rows (the instance, its
//     instance_runs row, its breakers: declared ones upserted, others
//     deleted) and reads its service's row, inserted when missing; the
//     service's last-seen time is moved only when no other transaction
//     holds the row (FOR NO KEY UPDATE SKIP LOCKED): 1,000 agents
//     connecting to two collectors at once do not wait on each other.
//
// A batch group that PostgreSQL still picks as a deadlock's victim, or
// ends for a serialization failure, is rolled back and run again (up to
// maxTries; commit.go), so that it does not fail its batches; the last
// try's failure is a transient error as any other. The writer's id
// caches stay valid across processes because rows are never renumbered;
// a breaker row another process's hello deleted is the one case they do
// not see by themselves: the process that deleted it says so
// (OnBreakersForgotten) and the others drop their cached rows of that
// instance (ForgetBreakers, forget.go).
//
// # Migrations
//
// Migrations are embedded and each runs in its own transaction (goose).
// Each backend has its folder, migrations/sqlite and migrations/postgres,
// with the same file names and version numbers: a database of either kind
// records the same versions, and Open refuses a database whose version is
// newer than this build's on both. To add a migration, add the same
// number to both folders: migrations/sqlite/000NN_name.sql and
// migrations/postgres/000NN_name.sql (BIGINT for integers, Unix ms do not
// fit PostgreSQL's INTEGER; DOUBLE PRECISION for REAL; BYTEA for BLOB;
// "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY" for an
// "INTEGER PRIMARY KEY" id; no WITHOUT ROWID; append-only triggers call
// refuse_delete('message')). Portable SQL may be the same text in both
// files. The store suite then runs the new migration on both (see
// internal/pgtest); TestMigrationsAreTheSameVersionsOnBothBackends fails
// when a number is in one folder only.
//
// Their numbers are ranges owned by area: 00001-00009 instances, windows,
// commands, agent tokens, the store's health probe (00005), data gaps
// (00006), misuse counts (00007) and the per-instance history (00008);
// 00010-00019 users and accounts; 00020-00029 incidents, alerts (their
// firing state: 00023) and configuration changes; 00030-00039 holds; 00040
// the handover of the singletons (leader marks, episode keys); 00041 the
// tables of the collectors' bus (internal/cluster; PostgreSQL only, the
// SQLite file of that version is empty); 00042 ramp rejections (a column
// of the windows tables). The 00001-00009 range is now full: the store's
// next migrations take 00043+ (00056: the writer column of the windows
// tables and the store_writers sequence).
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
// of transactions, not thousands. An operation someone waits for (a
// hello's record, a chunk of a hold: prompt) queued while a group's
// statements run joins that group before its COMMIT. Reads use a
// separate pool of read-only connections and never wait for the writer
// (WAL). The steps of a group commit are named in commit.go.
//
// An agent connection does not wait for each batch: it saves its batches
// on a Stream (stream.go), and the writer sends each batch's outcome to
// the stream, which the connection receives on a goroutine of its own.
// The writer runs no caller code and never waits for a caller. After a
// batch of a stream fails, the writer writes none of the stream's later
// batches until its owner answers the failure (Stream.Resume or Stop):
// a later batch stored past a failed one would make it look stored.
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
// stops declaring a breaker keeps its history), kept for
// Retention.InstanceMinutes (24 h by default): 1,000 instances with 20
// breakers make 29 million rows a day, tens of bytes each (small integers
// in a WITHOUT ROWID B-tree). They are not written in the batch's
// transaction: the writer adds a batch's share to sums in memory once the
// batch has committed (so a batch stored once counts once) and writes a
// minute's sums in rounds (every 10 s, up to 4,000 rows a transaction)
// once the minute has ended and a grace of 10 s has passed, and when the
// store closes (instance_minutes.go). Until then only this process sees
// them: its reads (InstanceHistory, FleetNotClosed) add them to the
// table's rows, while another collector sharing a PostgreSQL database
// reads the table alone and sees a minute about a minute late. A crash
// (kill -9, power loss) loses the sums not written yet: the current
// minute and, for up to about 20 s after its end, the last one. The
// per-dependency history is written in the batch's transaction.
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
// SaveBatch returns (and a Stream's outcome comes) only after COMMIT, and
// a batch's sequence-number bookkeeping is in the same transaction as its
// data, so an acknowledged batch survives the process being killed and is
// stored exactly once. Its per-instance minutes are the exception: counted
// once, but held in memory until their minute's round, so a crash loses
// them (see History layout). The
// writer connection uses synchronous=FULL, so acknowledged batches also
// survive a power loss; the group commit keeps that to one fsync per
// transaction. On PostgreSQL the same holds with the server's
// synchronous_commit (on by default).
//
// All times are stored as Unix milliseconds (UTC). Every method of Store is
// safe for concurrent use.
package store
