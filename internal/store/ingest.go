package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// ms converts a time to Unix milliseconds; the zero time is 0.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMs converts Unix milliseconds to a UTC time; 0 is the zero time.
func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func checkNames(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if strings.TrimSpace(fields[i+1]) == "" {
			return fmt.Errorf("%w: %s is required", cbdash.ErrInvalid, fields[i])
		}
	}
	return nil
}

// SaveHello records an agent's hello received at at: the service and the
// instance (labels, SDK version, agent start) are created or updated, and
// the instance's breakers are set to exactly those the hello declares (with
// their configurations; breakers no longer declared are forgotten, their
// transitions and history stay). It returns after the write has
// committed. Errors: cbdash.ErrInvalid when service or instance is empty,
// ErrClosed after Close, ctx's error, or a wrapped driver error.
func (s *Store) SaveHello(ctx context.Context, h protocol.Hello, at time.Time) error {
	if err := checkNames("service", h.Service, "instance", h.Instance); err != nil {
		return err
	}
	labels, err := json.Marshal(h.Labels)
	if err != nil {
		return fmt.Errorf("store: labels: %w", err)
	}
	if h.Labels == nil {
		labels = []byte("{}")
	}
	configs := make([][]byte, len(h.Breakers))
	names := make([]string, len(h.Breakers))
	for i, b := range h.Breakers {
		if configs[i], err = json.Marshal(b); err != nil {
			return fmt.Errorf("store: breaker config: %w", err)
		}
		names[i] = b.Name
	}
	namesJSON, _ := json.Marshal(names)
	now := ms(at)
	var forgot int64
	// shared: a hello writes its instance's rows, and reads (or inserts
	// when missing) the rows of its service, so on PostgreSQL it runs
	// beside other collectors' batch groups and hellos (doc.go, Several
	// writers): a fleet connecting to two collectors at once does not
	// take turns.
	err = s.w.do(ctx, &op{prompt: true, shared: true, run: func(x *wtx) (err error) {
		forgot, err = x.saveHello(&h, string(labels), configs, string(namesJSON), now)
		return err
	}})
	if err == nil && forgot > 0 {
		s.breakersForgotten(h.Service, h.Instance) // forget.go
	}
	return err
}

// saveHello writes hello h received at now (Unix ms): labels, the
// breakers' configurations and their names (JSON) encoded by SaveHello.
// It returns how many breaker rows no longer declared it deleted.
func (x *wtx) saveHello(h *protocol.Hello, labels string, configs [][]byte, namesJSON string, now int64) (int64, error) {
	inst, err := x.instance(h.Service, h.Instance, h.StartedAt, now)
	if err != nil {
		return 0, err
	}
	if err := x.serviceSeen(inst.serviceID, now); err != nil {
		return 0, fmt.Errorf("store: update service: %w", err)
	}
	if _, err := x.exec(`UPDATE instances SET sdk_version = $1, labels = $2, started_at = $3, last_seen = $4 WHERE id = $5`,
		h.SDKVersion, labels, h.StartedAt, now, inst.id); err != nil {
		return 0, fmt.Errorf("store: update instance: %w", err)
	}
	if _, err := x.exec(`INSERT INTO instance_runs (instance_id, started_at, last_seq) VALUES ($1, $2, 0)
		ON CONFLICT DO NOTHING`, inst.id, h.StartedAt); err != nil {
		return 0, fmt.Errorf("store: record agent run: %w", err)
	}
	res, err := x.exec(`DELETE FROM breakers WHERE instance_id = $1 AND name NOT IN (SELECT value FROM `+x.w.d.jsonEach("$2")+`)`,
		inst.id, namesJSON)
	if err != nil {
		return 0, fmt.Errorf("store: forget undeclared breakers: %w", err)
	}
	// The breakers' ids and states are cached as written: the first batch
	// after a hello (a fleet's, when it connects) looks none up. A failed
	// savepoint or transaction drops the caches (savepoint, finish).
	known := make(map[string]*brRef, len(h.Breakers))
	x.w.c.breakers[inst.id] = known
	for i, b := range h.Breakers {
		q, err := x.queryRow(`INSERT INTO breakers (instance_id, name, config) VALUES ($1, $2, $3)
			ON CONFLICT (instance_id, name) DO UPDATE SET config = excluded.config RETURNING id, state`,
			inst.id, b.Name, string(configs[i]))
		if err != nil {
			return 0, fmt.Errorf("store: save breaker %q: %w", b.Name, err)
		}
		br := &brRef{}
		if err := q.Scan(&br.id, &br.state); err != nil {
			return 0, fmt.Errorf("store: save breaker %q: %w", b.Name, err)
		}
		known[b.Name] = br
	}
	forgot, _ := res.RowsAffected()
	return forgot, nil
}

// serviceSeen moves the last-seen time of service id to now (Unix ms)
// at a hello. On PostgreSQL, where every instance of the service on
// every collector shares the row, it never waits: while another
// transaction holds the row (another collector's hello of the same
// service, seen just as recently), the update is skipped.
func (x *wtx) serviceSeen(id, now int64) error {
	if !x.w.d.postgres {
		_, err := x.exec(`UPDATE services SET last_seen = `+x.w.d.greatest("last_seen", "$1")+` WHERE id = $2`, now, id)
		return err
	}
	// FOR NO KEY UPDATE, as the UPDATE itself: it does not conflict with
	// the KEY SHARE lock another transaction's new instance row takes on
	// its service (the foreign key's check).
	_, err := x.exec(`UPDATE services SET last_seen = $1 WHERE id = (SELECT id FROM services
		WHERE id = $2 AND last_seen < $1 FOR NO KEY UPDATE SKIP LOCKED)`, now, id)
	return err
}

// instance returns the ids of (service, instance), creating the rows when
// they do not exist yet (a batch may arrive before any stored hello). On
// PostgreSQL the service's row is read, or inserted when missing, not
// upserted (batchInstance says why).
func (x *wtx) instance(service, instance string, startedAt, now int64) (instRef, error) {
	k := instKey{service, instance}
	if r, ok := x.w.c.instances[k]; ok {
		return r, nil
	}
	var r instRef
	if x.w.d.postgres {
		id, err := x.serviceID(service, now)
		if err != nil {
			return r, err
		}
		return x.saveInstance(k, id, startedAt, now)
	}
	q, err := x.queryRow(`INSERT INTO services (name, first_seen, last_seen) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET last_seen = `+x.w.d.greatest("services.last_seen", "excluded.last_seen")+` RETURNING id`, service, now, now)
	if err != nil {
		return r, err
	}
	if err := q.Scan(&r.serviceID); err != nil {
		return r, fmt.Errorf("store: save service: %w", err)
	}
	return x.saveInstance(k, r.serviceID, startedAt, now)
}

// saveInstance creates or updates the row of instance k of service
// serviceID and returns its ids.
func (x *wtx) saveInstance(k instKey, serviceID, startedAt, now int64) (instRef, error) {
	r := instRef{serviceID: serviceID}
	q, err := x.queryRow(`INSERT INTO instances (service_id, name, started_at, first_seen, last_seen) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (service_id, name) DO UPDATE SET last_seen = `+x.w.d.greatest("instances.last_seen", "excluded.last_seen")+` RETURNING id`,
		r.serviceID, k.instance, startedAt, now, now)
	if err != nil {
		return r, err
	}
	if err := q.Scan(&r.id); err != nil {
		return r, fmt.Errorf("store: save instance: %w", err)
	}
	x.w.c.instances[k] = r
	return r, nil
}

// breaker returns the cached row of breaker name on instance, creating it
// (with an empty configuration) when no hello declared it.
func (x *wtx) breaker(inst int64, name string) (*brRef, error) {
	m := x.w.c.breakers[inst]
	if m == nil {
		m = make(map[string]*brRef)
		x.w.c.breakers[inst] = m
	}
	if b, ok := m[name]; ok {
		return b, nil
	}
	q, err := x.queryRow(`INSERT INTO breakers (instance_id, name) VALUES ($1, $2)
		ON CONFLICT (instance_id, name) DO UPDATE SET name = excluded.name RETURNING id, state`, inst, name)
	if err != nil {
		return nil, err
	}
	b := &brRef{}
	if err := q.Scan(&b.id, &b.state); err != nil {
		return nil, fmt.Errorf("store: save breaker %q: %w", name, err)
	}
	m[name] = b
	return b, nil
}

// setState records a breaker's latest state, writing only on change.
func (x *wtx) setState(b *brRef, state string, transitionAt int64) error {
	if transitionAt != 0 {
		b.state = state
		_, err := x.exec(`UPDATE breakers SET state = $1, last_transition = `+x.w.d.greatest("last_transition", "$2")+` WHERE id = $3`,
			state, transitionAt, b.id)
		return err
	}
	if b.state == state {
		return nil
	}
	b.state = state
	_, err := x.exec(`UPDATE breakers SET state = $1 WHERE id = $2`, state, b.id)
	return err
}

// dep returns the id of a dependency, creating it on first use.
func (x *wtx) dep(service, breaker string) (int64, error) {
	k := cbdash.DependencyKey{Service: service, Breaker: breaker}
	if id, ok := x.w.c.deps[k]; ok {
		return id, nil
	}
	// Read first, then insert if missing: an upsert would lock the row,
	// which every instance and every writer of the dependency shares,
	// until COMMIT (see doc.go, Several writers).
	id, err := x.depID(service, breaker)
	if errors.Is(err, sql.ErrNoRows) {
		q, qerr := x.queryRow(`INSERT INTO dependencies (service, breaker) VALUES ($1, $2)
			ON CONFLICT (service, breaker) DO NOTHING RETURNING id`, service, breaker)
		if qerr != nil {
			return 0, qerr
		}
		if err = q.Scan(&id); errors.Is(err, sql.ErrNoRows) {
			id, err = x.depID(service, breaker) // another writer's, committed meanwhile
		}
	}
	if err != nil {
		return 0, fmt.Errorf("store: save dependency: %w", err)
	}
	x.w.c.deps[k] = id
	return id, nil
}

// depID reads the id of a dependency (sql.ErrNoRows: none yet).
func (x *wtx) depID(service, breaker string) (int64, error) {
	q, err := x.queryRow(`SELECT id FROM dependencies WHERE service = $1 AND breaker = $2`, service, breaker)
	if err != nil {
		return 0, err
	}
	var id int64
	err = q.Scan(&id)
	return id, err
}

// LastSeq returns the sequence number of the last batch stored for the
// agent process (service, instance, startedAt), 0 when none is. It reads
// committed data only, so a batch whose SaveBatch has returned is seen.
// Errors: ctx's or a wrapped driver error.
func (s *Store) LastSeq(ctx context.Context, service, instance string, startedAt int64) (uint64, error) {
	var seq int64
	err := s.rdb.QueryRowContext(ctx, `SELECT r.last_seq FROM instance_runs r
		JOIN instances i ON i.id = r.instance_id JOIN services sv ON sv.id = i.service_id
		WHERE sv.name = $1 AND i.name = $2 AND r.started_at = $3`, service, instance, startedAt).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("store: last seq: %w", err)
	}
	return uint64(seq), nil
}

// SaveBatch stores batch b of the agent process (service, instance,
// startedAt), received at at: its transitions, its window reports (summed
// into the per-dependency second buckets), its command results (the
// matching command targets become applied or failed; a result for a
// command of another service, or one that does not target instance, is
// ignored) and the instance's last-seen time and breaker states. The batch is queued to the writer,
// group-committed with other writes, and SaveBatch returns after COMMIT:
// (true, nil) means stored and safe to acknowledge. A batch whose Seq is
// at or below the last one stored for the process is a duplicate and
// returns (false, nil) without writing anything; the check is in the same
// transaction as the data, so a batch is stored exactly once (its
// per-instance minutes are added to the writer's sums in memory once it
// has committed, and written later: see the package documentation).
//
// A report counts in the second its Start falls in (a report longer than
// a second, merged by an agent under pressure, is not spread out). The
// store does not validate the batch beyond what it needs (use
// protocol.Batch.Validate first). Errors: cbdash.ErrInvalid for an empty
// service or instance or a zero Seq, ErrClosed after Close, ctx's error
// (the batch may then still be stored; it is not acknowledged and a resend
// is recognised as a duplicate), or a wrapped driver error.
func (s *Store) SaveBatch(ctx context.Context, service, instance string, startedAt int64, b protocol.Batch, at time.Time) (bool, error) {
	if err := checkNames("service", service, "instance", instance); err != nil {
		return false, err
	}
	if b.Seq == 0 || b.Seq > math.MaxInt64 {
		return false, fmt.Errorf("%w: seq %d is out of range", cbdash.ErrInvalid, b.Seq)
	}
	causes, err := transitionCauses(&b)
	if err != nil {
		return false, err
	}
	stored := false
	now := ms(at)
	err = s.w.do(ctx, &op{shared: true, inst: &instName{service, instance, startedAt}, run: func(x *wtx) error {
		var err error
		stored, err = x.saveBatch(service, instance, startedAt, &b, causes, now)
		return err
	}})
	if err != nil {
		return false, err
	}
	return stored, nil
}

// transitionCauses encodes the causes of b's transitions, as stored.
func transitionCauses(b *protocol.Batch) ([][]byte, error) {
	if len(b.Transitions) == 0 {
		return nil, nil
	}
	causes := make([][]byte, len(b.Transitions))
	for i := range b.Transitions {
		var err error
		if causes[i], err = json.Marshal(b.Transitions[i].Cause); err != nil {
			return nil, fmt.Errorf("store: transition cause: %w", err)
		}
	}
	return causes, nil
}

// saveBatch writes batch b of the agent process (service, instance,
// startedAt) received at now (Unix ms) in the op's savepoint, with
// causes its transitions' causes (transitionCauses): false when its seq
// is at or below the process's last (a duplicate, nothing written). The
// transitions, command results and data gaps are written now; the last
// seq, the last-seen time and the window reports are staged for the
// group (flush) once nothing can fail any more.
func (x *wtx) saveBatch(service, instance string, startedAt int64, b *protocol.Batch, causes [][]byte, now int64) (bool, error) {
	inst, err := x.batchInstance(service, instance, startedAt, now)
	if err != nil {
		return false, err
	}
	rk := runKey{inst.id, startedAt}
	last, err := x.lastSeq(rk)
	if err != nil {
		return false, err
	}
	seq := int64(b.Seq)
	if seq <= last {
		x.w.c.seqs[rk] = last
		return false, nil
	}
	// The seq and the instance's last-seen time are staged (x.runs,
	// x.seen, at the end) and written by flush with the group's other
	// rows, in the same transaction. A failure after this resets the
	// caches (savepoint), so the cache never holds a seq that was rolled
	// back.
	x.w.c.seqs[rk] = seq
	if err := x.saveTransitions(service, instance, inst.id, b, causes, now); err != nil {
		return false, err
	}
	if err := x.saveShadowTransitions(service, instance, b.ShadowTransitions, now); err != nil {
		return false, err
	}
	if err := x.saveCommandResults(service, instance, b.CommandResults); err != nil {
		return false, err
	}
	if err := x.saveGaps(service, instance, b.Dropped, now); err != nil {
		return false, err
	}
	deps, err := x.windowDeps(service, inst.id, b.Windows)
	if err != nil {
		return false, err
	}
	x.stageBatch(rk, seq, inst.id, now, deps, b.Windows)
	return true, nil
}

// batchInstance is instance for a batch. On PostgreSQL, where the batch
// groups of several processes run at once, an instance that exists is
// read, not upserted: the upsert locks the row of its service, which
// every instance of the service shares, until COMMIT.
func (x *wtx) batchInstance(service, instance string, startedAt, now int64) (instRef, error) {
	k := instKey{service, instance}
	if r, ok := x.w.c.instances[k]; ok {
		return r, nil
	}
	if !x.w.d.postgres {
		return x.instance(service, instance, startedAt, now)
	}
	var r instRef
	q, err := x.queryRow(`SELECT i.id, i.service_id FROM instances i JOIN services s ON s.id = i.service_id
		WHERE s.name = $1 AND i.name = $2`, service, instance)
	if err != nil {
		return r, err
	}
	switch err := q.Scan(&r.id, &r.serviceID); {
	case errors.Is(err, sql.ErrNoRows):
		// A batch before any stored hello. The service's row is read, or
		// inserted if missing, not upserted (see above).
		id, err := x.serviceID(service, now)
		if err != nil {
			return r, err
		}
		return x.saveInstance(k, id, startedAt, now)
	case err != nil:
		return r, fmt.Errorf("store: read instance: %w", err)
	}
	x.w.c.instances[k] = r
	return r, nil
}

// serviceID returns the id of service name, inserting its row (seen at
// now) when there is none, without locking an existing one.
func (x *wtx) serviceID(name string, now int64) (int64, error) {
	var id int64
	sel := func() error {
		q, err := x.queryRow(`SELECT id FROM services WHERE name = $1`, name)
		if err != nil {
			return err
		}
		return q.Scan(&id)
	}
	err := sel()
	if errors.Is(err, sql.ErrNoRows) {
		q, qerr := x.queryRow(`INSERT INTO services (name, first_seen, last_seen) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO NOTHING RETURNING id`, name, now, now)
		if qerr != nil {
			return 0, qerr
		}
		if err = q.Scan(&id); errors.Is(err, sql.ErrNoRows) {
			err = sel() // another writer's, committed meanwhile
		}
	}
	if err != nil {
		return 0, fmt.Errorf("store: save service: %w", err)
	}
	return id, nil
}

// lastSeq returns the last stored seq of an agent process: staged by an
// earlier op of this group, else, on PostgreSQL, read under the lock of
// its instance_runs row (lockRun: another process may have stored its
// batches meanwhile), on SQLite cached or read from instance_runs (0
// when none is).
func (x *wtx) lastSeq(rk runKey) (int64, error) {
	if x.w.d.postgres {
		if staged, ok := x.runs[rk]; ok {
			return staged, nil // above the locked one: it passed the check
		}
		return x.lockRun(rk)
	}
	last, known := x.w.c.seqs[rk]
	if staged, ok := x.runs[rk]; ok && (!known || staged > last) {
		// Stored by an earlier op of this group (the cache may have been
		// reset since by a failed op): not in the table until flush.
		return staged, nil
	}
	if known {
		return last, nil
	}
	q, err := x.queryRow(`SELECT last_seq FROM instance_runs WHERE instance_id = $1 AND started_at = $2`, rk.inst, rk.startedAt)
	if err != nil {
		return 0, err
	}
	switch err := q.Scan(&last); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return 0, fmt.Errorf("store: read last seq: %w", err)
	}
	return last, nil
}

// saveTransitions writes the transitions of b (of instance id inst) and
// the breakers' states they lead to.
func (x *wtx) saveTransitions(service, instance string, inst int64, b *protocol.Batch, causes [][]byte, now int64) error {
	for i := range b.Transitions {
		t := &b.Transitions[i]
		if _, err := x.exec(`INSERT INTO transitions (service, instance, breaker, from_state, to_state, at, generation, cause, open_ms, received_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, service, instance, t.Breaker, t.From, t.To, t.At,
			int64(t.Generation), string(causes[i]), t.OpenMillis, now); err != nil {
			return fmt.Errorf("store: save transition: %w", err)
		}
		br, err := x.breaker(inst, t.Breaker)
		if err != nil {
			return err
		}
		if err := x.setState(br, t.To, t.At); err != nil {
			return fmt.Errorf("store: breaker state: %w", err)
		}
	}
	return nil
}

// saveShadowTransitions writes the would-be transitions of the shadow
// configurations in ts (batch shadow_transitions) to their own table.
// They change no breaker state: no reader of live transitions sees them.
func (x *wtx) saveShadowTransitions(service, instance string, ts []protocol.Transition, now int64) error {
	for i := range ts {
		t := &ts[i]
		cause, err := json.Marshal(t.Cause)
		if err != nil {
			return fmt.Errorf("store: shadow transition cause: %w", err)
		}
		if _, err := x.exec(`INSERT INTO shadow_transitions (service, instance, breaker, shadow, from_state, to_state, at, generation, cause, open_ms, received_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, service, instance, t.Breaker, t.Shadow, t.From, t.To, t.At,
			int64(t.Generation), string(cause), t.OpenMillis, now); err != nil {
			return fmt.Errorf("store: save shadow transition: %w", err)
		}
	}
	return nil
}

// saveCommandResults marks the command targets the results answer
// applied or failed.
func (x *wtx) saveCommandResults(service, instance string, results []protocol.CommandResult) error {
	for _, r := range results {
		status := cbdash.TargetApplied
		if !r.OK {
			status = cbdash.TargetFailed
		}
		// Only a target of this service's command, for the breaker the
		// command named: an instance of another service with the same
		// name cannot answer for it, nor a result naming another breaker.
		if _, err := x.exec(`UPDATE command_targets SET status = $1, state = $2, error = $3, at = $4
			WHERE command_id = $5 AND instance = $6 AND command_id IN (SELECT id FROM commands WHERE id = $7 AND service = $8 AND breaker = $9)`,
			status, r.State, r.Error, r.At, r.ID, instance, r.ID, service, r.Breaker); err != nil {
			return fmt.Errorf("store: save command result: %w", err)
		}
	}
	return nil
}

// windowDeps returns the dependency id of each window report (created on
// first use) and records the breakers' states the reports carry.
func (x *wtx) windowDeps(service string, inst int64, windows []protocol.Window) ([]int64, error) {
	deps := make([]int64, len(windows))
	for i := range windows {
		w := &windows[i]
		var err error
		if deps[i], err = x.dep(service, w.Breaker); err != nil {
			return nil, err
		}
		br, err := x.breaker(inst, w.Breaker)
		if err != nil {
			return nil, err
		}
		if err := x.setState(br, w.State, 0); err != nil {
			return nil, fmt.Errorf("store: breaker state: %w", err)
		}
	}
	return deps, nil
}

// stageBatch stages what a batch leaves for the group's flush: its seq,
// its instance's last-seen time (seenEvery), its window reports in the
// per-second accumulators and its instance minutes. Last, once nothing
// can fail any more: the accumulators and staged rows are not rolled
// back with the savepoint.
func (x *wtx) stageBatch(rk runKey, seq, inst, now int64, deps []int64, windows []protocol.Window) {
	x.runs[rk] = seq
	if at, ok := x.w.c.seen[inst]; !ok || now-at >= seenEvery || now < at {
		x.seen[inst] = max(x.seen[inst], now)
	}
	for i := range windows {
		x.acc.addWindow(deps[i], &windows[i])
		x.addInstanceMinute(deps[i], inst, &windows[i])
	}
}

// flushRuns writes the staged last seqs (instance_runs) and last-seen
// times (instances) of the group's batches in multi-row statements.
func (x *wtx) flushRuns() error {
	if len(x.runs) > 0 {
		args := make([]any, 0, 3*len(x.runs))
		for _, rk := range sortedRuns(x.runs) {
			args = append(args, rk.inst, rk.startedAt, x.runs[rk])
		}
		if err := x.execRows(3, args, func(values string) string {
			return "INSERT INTO instance_runs (instance_id, started_at, last_seq) VALUES " + values +
				" ON CONFLICT (instance_id, started_at) DO UPDATE SET last_seq = excluded.last_seq"
		}); err != nil {
			return fmt.Errorf("store: record seq: %w", err)
		}
	}
	if len(x.seen) > 0 {
		ids := make([]int64, 0, len(x.seen))
		for id := range x.seen {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		args := make([]any, 0, 2*len(x.seen))
		for _, id := range ids {
			args = append(args, id, x.seen[id])
		}
		// VALUES names its columns column1, column2... in both SQLite and
		// PostgreSQL.
		if err := x.execRows(2, args, func(values string) string {
			return "UPDATE instances SET last_seen = " + x.w.d.greatest("last_seen", "v.column2") + " FROM (VALUES " + values +
				") AS v WHERE instances.id = v.column1"
		}); err != nil {
			return fmt.Errorf("store: touch instances: %w", err)
		}
	}
	return nil
}

// execRows runs the statement query(values) over rows of cols integer
// parameters each (args, flat), in statements of 100, 10 and 1 rows, so
// that a few statement shapes are prepared whatever the count.
func (x *wtx) execRows(cols int, args []any, query func(values string) string) error {
	return x.execShapes(cols, args, "BIGINT", []int{100, 10, 1}, query)
}

// insertRows is execRows for an INSERT's VALUES, whose parameters take
// the types of the columns they are inserted into (of any type, not cast).
func (x *wtx) insertRows(cols int, args []any, query func(values string) string) error {
	return x.execShapes(cols, args, "", []int{10, 1}, query)
}

// execShapes runs query(values) over rows of cols parameters each, cast
// to cast ("" = not cast), in statements of the numbers of rows shapes
// gives (largest first; the last must be 1). query must have no
// parameters but those of values: on SQLite they are anonymous
// (anonymousParams: cheaper to bind).
func (x *wtx) execShapes(cols int, args []any, cast string, shapes []int, query func(values string) string) error {
	for _, n := range shapes {
		for len(args) >= n*cols {
			values := placeholders(n, cols, cast)
			if !x.w.d.postgres {
				values = anonymousParams(values)
			}
			if _, err := x.exec(query(values), args[:n*cols]...); err != nil {
				return err
			}
			args = args[n*cols:]
		}
	}
	return nil
}

// placeholders returns n rows of cols parameters, "($1, $2), ($3, $4)...",
// each cast to cast unless it is "" ("(CAST($1 AS BIGINT), ...": the casts
// type PostgreSQL's parameters where nothing else does), numbered from $1
// row after row, cached by shape.
func placeholders(n, cols int, cast string) string {
	k := placeholderShape{n, cols, cast}
	placeholderMu.Lock()
	defer placeholderMu.Unlock()
	if p, ok := placeholderCache[k]; ok {
		return p
	}
	var b strings.Builder
	for r := range n {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(")
		for c := range cols {
			if c > 0 {
				b.WriteString(", ")
			}
			if cast == "" {
				fmt.Fprintf(&b, "$%d", r*cols+c+1)
			} else {
				fmt.Fprintf(&b, "CAST($%d AS %s)", r*cols+c+1, cast)
			}
		}
		b.WriteString(")")
	}
	p := b.String()
	placeholderCache[k] = p
	return p
}

type placeholderShape struct {
	n, cols int
	cast    string
}

var (
	placeholderMu    sync.Mutex
	placeholderCache = map[placeholderShape]string{}
)
