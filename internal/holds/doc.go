// Package holds keeps operator holds (force open, force closed) as desired
// state and applies them to agent processes, counts what each covered
// breaker did while held (drill statistics), and writes drill reports.
//
// A Manager keeps every live hold in memory (restored from the store at
// start) and applies, to every instance breaker, the hold that governs it
// (cbdash.Governing: the most recently created live hold whose selector
// matches). It does so when a hold is created or released, when a hold
// expires (an older hold may govern again), when another collector of the
// cluster changed a hold (Adopt), and at every hello of an instance: its
// first connection, a reconnection, and a restart under a new id or the
// same one. An instance on HTTP ingest has no connection: what it needs is
// recorded as pending targets of the command, which its next ingest
// response carries (Pull).
//
// A hold is sent per service as one command (id CommandID: "<hold>-<service
// hash>", recorded in the audit log with the hold's id) whose targets are
// the instances it reached, so the breakers' answers land where every
// command's do. An agent applies a command id once per process; a process
// that reconnects is sent the same id again (it answers with its first
// result), a new process applies it afresh. When a process falls back to an
// older hold after a newer one ended, the older hold is sent under a new
// id. The agent enforces the expiry it was given (ttl) on its own, so a
// hold ends on time even when the collector is unreachable; a released hold
// is sent as a release command (ReleaseCommandID), also per service.
//
// The package depends only on the interfaces it declares: the instances a
// hold covers (Instances, with a Conn to deliver to), a Store of the
// handful of methods it reads and writes, Events to publish command
// changes, and Cluster to say a hold changed. The collector implements
// them and wires a Manager in.
//
// # Locks
//
// Manager.mu guards in-memory state only (the holds, what was applied
// where, the commands known to be stored) and is never held across I/O, a
// store write or a delivery; it may take the Instances' own lock (the
// listing is in memory), never the reverse. Applying holds to one instance
// is a decision under mu (a plan of commands to write and send; a chunk
// of a change takes mu for one instance's plan at a time), the writes
// and sends outside it, then the outcome recorded under mu. The
// work for one instance key takes a turn (one at a time per key, so that
// a hello and a hold created at the same moment never both decide for one
// instance breaker, and a command is stored before it is sent to it): a
// turn waits only for that same instance's own writes, never for another
// instance's. When the holds changed while an instance's plan was being
// carried out (a generation count under mu), the instance is planned
// again before its turn ends. Statistics have their own lock (statsMu),
// which takes nothing else: Observe runs on the ingest sessions'
// goroutines once a batch is stored.
package holds
