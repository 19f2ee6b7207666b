// Package cluster is what several collectors sharing one PostgreSQL
// database use to behave as one: the fan-out of live events between them,
// the routing of a command to the collector that holds an instance's
// connection, and the leadership of the singletons (incident detection,
// alert delivery, compaction) that exactly one collector must run.
//
// Two implementations share the Bus interface. Local is the single node of
// an SQLite deployment: nothing to fan out to, no other collector to route
// to, and it leads everything. Postgres carries all three on the database
// the collectors already share, so that running several collectors adds no
// moving part:
//
//   - fan-out: NOTIFY on one channel (cbdash_bus) that every node LISTENs
//     on; a payload too big for NOTIFY's 8000 bytes (or not text) is
//     written to the table cbdash_cluster_payloads and sent by reference.
//     One node's messages arrive at every other node in the order it
//     published them. NOTIFY is not durable: a node whose listening
//     connection drops misses what was sent meanwhile, and its subscribers
//     are told so (Message.Gap) to resynchronise from the store.
//   - routing: a node claims an instance when the instance connects to it
//     (table cbdash_cluster_routes, with the process id of the node's
//     listening connection); Route finds the claim whose connection is
//     still alive in pg_stat_activity and NOTIFYs that node's own channel.
//     A node that died holds no route: its connection is gone.
//   - leadership: Lead holds pg_try_advisory_lock on a connection of its
//     own for as long as the connection lives; when it is lost (the node
//     killed, pg_terminate_backend, a network failure) PostgreSQL releases
//     the lock and another node's next try takes it.
//
// Channels and advisory locks belong to the database, not to a schema: a
// deployment whose connections use another schema than public (by
// search_path) suffixes its channels and lock names with a hash of the
// schema's name, so that deployments in two schemas of one database stay
// apart.
//
// Its two tables are the store's: they come with the store's migrations
// (internal/store/migrations/postgres/00041_cluster.sql), so the store is
// opened, which migrates the database, before Open (ErrNoSchema
// otherwise). Its connections are its own, not the store's pools: LISTEN
// and each leader's session advisory lock hold a connection for as long
// as they last, and the store has one writer connection (owned by its
// group commit) and read-only readers, neither of which a NOTIFY with its
// payload row, a claim or a route may wait on or use.
//
// Each of its connections is named in pg_stat_activity (application_name
// cbdash-listen-<node>, cbdash-lead-<singleton>-<node>).
//
// See docs/scaling.md for the deployment and what happens when each part
// fails.
package cluster
