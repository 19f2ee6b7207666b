package store

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// The seq rows (instance_runs) of the agent processes a batch group
// writes are its dedup: on PostgreSQL two processes' batch groups run at
// once (the schema's lock is shared), and an agent that failed over may
// have batches in both (the old collector's queue, the new one's
// resend). Each group locks the rows of its agents' processes and reads
// their last seqs under the lock, so the second of two groups holding
// the same batch waits for the first's COMMIT and sees the batch stored
// (a duplicate). Every other row a batch writes for its instance
// (breakers, instances, command targets) is touched after that lock, so
// two groups meet on an instance in the order of its seq rows.

// lockRuns locks, in one statement at the start of a batch group on
// PostgreSQL, the instance_runs rows of every agent process of the
// instances of ops whose ids the writer knows, in order of (instance,
// start) (every group locks in the same order, so groups that share
// instances wait for each other instead of deadlocking), and keeps their
// last seqs (x.locked). An instance the writer does not know yet is
// locked by its op (lockRun).
func (x *wtx) lockRuns(ops []*op) error {
	ids := make([]int64, 0, len(ops))
	for _, o := range ops {
		if o.inst == nil || o.err != nil {
			continue
		}
		if r, ok := x.w.c.instances[instKey{o.inst.service, o.inst.instance}]; ok {
			ids = append(ids, r.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	st, err := x.st(`SELECT instance_id, started_at, last_seq FROM instance_runs WHERE instance_id = ANY($1)
		ORDER BY instance_id, started_at FOR UPDATE`)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(x.ctx, ids)
	if err != nil {
		return fmt.Errorf("store: lock seqs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rk runKey
		var seq int64
		if err := rows.Scan(&rk.inst, &rk.startedAt, &seq); err != nil {
			return fmt.Errorf("store: lock seqs: %w", err)
		}
		x.locked[rk] = seq
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: lock seqs: %w", err)
	}
	return nil
}

// lockRun returns the last seq of agent process rk read under the lock
// of its instance_runs row: locked by the group already (lockRuns), or
// now, creating the row when the process has none yet (a batch before
// any stored hello), so that a concurrent group of another process waits
// for this one's COMMIT. PostgreSQL only.
func (x *wtx) lockRun(rk runKey) (int64, error) {
	if seq, ok := x.locked[rk]; ok {
		return seq, nil
	}
	seq, err := x.selectRunForUpdate(rk)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err = x.exec(`INSERT INTO instance_runs (instance_id, started_at, last_seq) VALUES ($1, $2, 0)
			ON CONFLICT DO NOTHING`, rk.inst, rk.startedAt); err == nil {
			seq, err = x.selectRunForUpdate(rk)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("store: lock seq: %w", err)
	}
	x.locked[rk] = seq
	if x.inOp {
		x.opLocked = append(x.opLocked, rk)
	}
	return seq, nil
}

func (x *wtx) selectRunForUpdate(rk runKey) (int64, error) {
	q, err := x.queryRow(`SELECT last_seq FROM instance_runs WHERE instance_id = $1 AND started_at = $2 FOR UPDATE`, rk.inst, rk.startedAt)
	if err != nil {
		return 0, err
	}
	var seq int64
	err = q.Scan(&seq)
	return seq, err
}

// sortedRuns returns the staged last seqs' keys in the order lockRuns
// locks them, so that the group's writes of shared tables go in one
// order too.
func sortedRuns(m map[runKey]int64) []runKey {
	keys := make([]runKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b runKey) int {
		if a.inst != b.inst {
			return cmpInt(a.inst, b.inst)
		}
		return cmpInt(a.startedAt, b.startedAt)
	})
	return keys
}
