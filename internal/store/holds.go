package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// maxHolds caps HoldQuery.Limit.
const maxHolds = 5000

// CreateHold records a hold (desired state). Its Coverage is not stored
// here (see AddHoldCoverage). Errors: cbdash.ErrInvalid for a missing id,
// a bad selector or action, or a zero CreatedAt or Until;
// cbdash.ErrConflict when the id exists; ErrClosed, ctx's or a wrapped
// driver error.
func (s *Store) CreateHold(ctx context.Context, h cbdash.HoldRecord) error {
	if err := checkNames("id", h.ID); err != nil {
		return err
	}
	if err := h.Selector.Validate(); err != nil {
		return err
	}
	if h.Action != protocol.ActionForceOpen && h.Action != protocol.ActionForceClosed {
		return fmt.Errorf("%w: hold action %q is not force_open or force_closed", cbdash.ErrInvalid, h.Action)
	}
	if h.CreatedAt.IsZero() || h.Until.IsZero() {
		return fmt.Errorf("%w: hold created_at and until are required", cbdash.ErrInvalid)
	}
	sel, err := json.Marshal(h.Selector)
	if err != nil {
		return fmt.Errorf("%w: selector: %v", cbdash.ErrInvalid, err)
	}
	drill, err := marshalDrill(h)
	if err != nil {
		return err
	}
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		q, err := x.queryRow("SELECT count(*) FROM holds WHERE id = $1", h.ID)
		if err != nil {
			return err
		}
		var n int
		if err := q.Scan(&n); err != nil {
			return fmt.Errorf("store: create hold: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("%w: hold %q exists", cbdash.ErrConflict, h.ID)
		}
		if _, err := x.exec(`INSERT INTO holds (id, selector, service, breaker, action, ttl_ms, reason, actor, created_at, until, drill)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, h.ID, string(sel), h.Selector.Service, h.Selector.Breaker, h.Action,
			h.TTL.Milliseconds(), h.Reason, h.Actor, ms(h.CreatedAt), ms(h.Until), drill); err != nil {
			return fmt.Errorf("store: create hold: %w", err)
		}
		return nil
	}})
}

// ReleaseHold records that by ended hold id at at, for reason, and
// returns the hold as released. Errors: cbdash.ErrNotFound for an unknown
// id; cbdash.ErrConflict when the hold was already released or had
// expired at at; ErrClosed, ctx's or a wrapped driver error.
func (s *Store) ReleaseHold(ctx context.Context, id string, at time.Time, by, reason string) (cbdash.HoldRecord, error) {
	return s.releaseHold(ctx, id, at, by, reason, "")
}

// StopHold is ReleaseHold for a hold a stop condition ended: b is recorded
// with it (HoldRecord.Breach) and its reason is b.Reason(). Errors as
// ReleaseHold's.
func (s *Store) StopHold(ctx context.Context, id string, by string, b cbdash.HoldBreach) (cbdash.HoldRecord, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return cbdash.HoldRecord{}, fmt.Errorf("%w: breach: %v", cbdash.ErrInvalid, err)
	}
	return s.releaseHold(ctx, id, b.At, by, b.Reason(), string(raw))
}

func (s *Store) releaseHold(ctx context.Context, id string, at time.Time, by, reason, breach string) (cbdash.HoldRecord, error) {
	err := s.w.do(ctx, &op{run: func(x *wtx) error {
		q, err := x.queryRow("SELECT until, released_at FROM holds WHERE id = $1", id)
		if err != nil {
			return err
		}
		var until, released int64
		switch err := q.Scan(&until, &released); {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: hold %q", cbdash.ErrNotFound, id)
		case err != nil:
			return fmt.Errorf("store: release hold: %w", err)
		case released != 0:
			return fmt.Errorf("%w: hold %q was already released at %s", cbdash.ErrConflict, id, fromMs(released).Format(time.RFC3339))
		case until <= ms(at):
			return fmt.Errorf("%w: hold %q expired at %s", cbdash.ErrConflict, id, fromMs(until).Format(time.RFC3339))
		}
		if _, err := x.exec("UPDATE holds SET released_at = $1, released_by = $2, release_reason = $3, breach = $4 WHERE id = $5",
			ms(at), by, reason, breach, id); err != nil {
			return fmt.Errorf("store: release hold: %w", err)
		}
		return nil
	}})
	if err != nil {
		return cbdash.HoldRecord{}, err
	}
	return s.Hold(ctx, id)
}

// AddHoldCoverage records that hold holdID was sent to c's instance
// breaker (replacing the record of an earlier send to the same agent
// process). Errors: cbdash.ErrInvalid for missing names,
// cbdash.ErrNotFound for an unknown hold, ErrClosed, ctx's or a wrapped
// driver error.
func (s *Store) AddHoldCoverage(ctx context.Context, holdID string, c cbdash.HoldCoverage) error {
	if err := checkNames("service", c.Service, "instance", c.Instance, "breaker", c.Breaker, "command id", c.CommandID); err != nil {
		return err
	}
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		q, err := x.queryRow("SELECT count(*) FROM holds WHERE id = $1", holdID)
		if err != nil {
			return err
		}
		var n int
		if err := q.Scan(&n); err != nil {
			return fmt.Errorf("store: hold coverage: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("%w: hold %q", cbdash.ErrNotFound, holdID)
		}
		if _, err := x.exec(insertCoverage,
			holdID, c.Service, c.Instance, c.Breaker, c.StartedAt, c.CommandID, ms(c.CoveredAt), c.JoinedLate); err != nil {
			return fmt.Errorf("store: hold coverage: %w", err)
		}
		return nil
	}})
}

// insertCoverage records a coverage row, replacing the command id and
// time of an earlier send to the same agent process (its JoinedLate
// stays).
var insertCoverage = upsertCoverage(placeholders(1, 8, ""))

const holdColumns = `id, selector, action, ttl_ms, reason, actor, created_at, until, released_at, released_by, release_reason, drill, breach`

// holdDrill is a hold's drill settings as the drill column keeps them.
type holdDrill struct {
	StopIf     []cbdash.StopCondition `json:"stop_if,omitempty"`
	DropStops  []string               `json:"drop_stop_if,omitempty"`
	DropReason string                 `json:"drop_reason,omitempty"`
	Stops      []cbdash.StopCondition `json:"stops,omitempty"`
	Steps      []cbdash.HoldStep      `json:"steps,omitempty"`
}

// marshalDrill is h's drill column: "" for a hold without drill settings.
func marshalDrill(h cbdash.HoldRecord) (string, error) {
	d := holdDrill{StopIf: h.StopIf, DropStops: h.DropStops, DropReason: h.DropReason, Stops: h.Stops, Steps: h.Steps}
	if len(d.StopIf)+len(d.DropStops)+len(d.Stops)+len(d.Steps) == 0 && d.DropReason == "" {
		return "", nil
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("%w: drill: %v", cbdash.ErrInvalid, err)
	}
	return string(raw), nil
}

// unmarshalDrill sets h's drill settings and breach from their columns.
func unmarshalDrill(h *cbdash.HoldRecord, drill, breach string) error {
	h.Stops = []cbdash.StopCondition{}
	if drill != "" {
		var d holdDrill
		if err := json.Unmarshal([]byte(drill), &d); err != nil {
			return fmt.Errorf("drill of hold %q: %w", h.ID, err)
		}
		h.StopIf, h.DropStops, h.DropReason, h.Steps = d.StopIf, d.DropStops, d.DropReason, d.Steps
		if d.Stops != nil {
			h.Stops = d.Stops
		}
	}
	if breach != "" {
		h.Breach = new(cbdash.HoldBreach)
		if err := json.Unmarshal([]byte(breach), h.Breach); err != nil {
			return fmt.Errorf("breach of hold %q: %w", h.ID, err)
		}
	}
	return nil
}

func scanHold(sc interface{ Scan(...any) error }) (cbdash.HoldRecord, error) {
	var h cbdash.HoldRecord
	var sel, drill, breach string
	var ttl, created, until, released int64
	if err := sc.Scan(&h.ID, &sel, &h.Action, &ttl, &h.Reason, &h.Actor, &created, &until, &released,
		&h.ReleasedBy, &h.ReleaseReason, &drill, &breach); err != nil {
		return h, err
	}
	if err := json.Unmarshal([]byte(sel), &h.Selector); err != nil {
		return h, fmt.Errorf("selector of hold %q: %w", h.ID, err)
	}
	if err := unmarshalDrill(&h, drill, breach); err != nil {
		return h, err
	}
	h.TTL = time.Duration(ttl) * time.Millisecond
	h.CreatedAt, h.Until, h.ReleasedAt = fromMs(created), fromMs(until), fromMs(released)
	h.Coverage = []cbdash.HoldCoverage{}
	return h, nil
}

// Hold returns one hold with its coverage (each instance breaker it was
// sent to, with the breaker's answer). Errors: cbdash.ErrNotFound, ctx's
// or a wrapped driver error.
func (s *Store) Hold(ctx context.Context, id string) (cbdash.HoldRecord, error) {
	h, err := scanHold(s.rdb.QueryRowContext(ctx, "SELECT "+holdColumns+" FROM holds WHERE id = $1", id))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cbdash.HoldRecord{}, fmt.Errorf("%w: hold %q", cbdash.ErrNotFound, id)
	case err != nil:
		return cbdash.HoldRecord{}, fmt.Errorf("store: hold: %w", err)
	}
	hs := []cbdash.HoldRecord{h}
	if err := s.loadCoverage(ctx, hs); err != nil {
		return cbdash.HoldRecord{}, err
	}
	return hs[0], nil
}

// Holds returns the holds matching q, newest first, with their coverage.
// Limit 0 means 200 and is capped at 5,000. Errors: cbdash.ErrInvalid for
// a negative limit, ctx's or a wrapped driver error.
func (s *Store) Holds(ctx context.Context, q cbdash.HoldQuery) ([]cbdash.HoldRecord, error) {
	if q.Limit < 0 {
		return nil, fmt.Errorf("%w: limit is negative", cbdash.ErrInvalid)
	}
	limit := q.Limit
	if limit == 0 {
		limit = 200
	}
	limit = min(limit, maxHolds)
	query, args := "SELECT "+holdColumns+" FROM holds", params{}
	if !q.LiveAt.IsZero() {
		at := args.add(ms(q.LiveAt))
		query += " WHERE created_at <= " + at + " AND until > " + at + " AND (released_at = 0 OR released_at > " + at + ")"
	}
	query += " ORDER BY created_at DESC, id DESC LIMIT " + args.add(limit)
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: holds: %w", err)
	}
	defer rows.Close()
	out := []cbdash.HoldRecord{}
	for rows.Next() {
		h, err := scanHold(rows)
		if err != nil {
			return nil, fmt.Errorf("store: holds: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: holds: %w", err)
	}
	rows.Close()
	if err := s.loadCoverage(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// loadCoverage fills the coverage of hs, with each target's answer, in
// one query.
func (s *Store) loadCoverage(ctx context.Context, hs []cbdash.HoldRecord) error {
	if len(hs) == 0 {
		return nil
	}
	idx := make(map[string]int, len(hs))
	args := make([]any, len(hs))
	for i, h := range hs {
		idx[h.ID] = i
		args[i] = h.ID
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT v.hold_id, v.service, v.instance, v.breaker, v.started_at, v.command_id,
		v.covered_at, v.joined_late, coalesce(t.status, ''), coalesce(t.state, ''), coalesce(t.error, ''), coalesce(t.at, 0)
		FROM hold_coverage v LEFT JOIN command_targets t ON t.command_id = v.command_id AND t.instance = v.instance
		WHERE v.hold_id IN (SELECT value FROM `+s.rdb.d.jsonEach("$1")+`)
		ORDER BY v.hold_id, v.service, v.instance, v.breaker, v.started_at`, jsonStrings(args))
	if err != nil {
		return fmt.Errorf("store: hold coverage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var c cbdash.HoldCoverage
		var covered, at int64
		if err := rows.Scan(&id, &c.Service, &c.Instance, &c.Breaker, &c.StartedAt, &c.CommandID, &covered,
			&c.JoinedLate, &c.Status, &c.State, &c.Error, &at); err != nil {
			return fmt.Errorf("store: hold coverage: %w", err)
		}
		c.CoveredAt = fromMs(covered)
		if c.Status == "" {
			c.Status = cbdash.TargetPending
		}
		if c.Status != cbdash.TargetPending {
			c.AnsweredAt = fromMs(at)
		}
		if i, ok := idx[id]; ok {
			hs[i].Coverage = append(hs[i].Coverage, c)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: hold coverage: %w", err)
	}
	return nil
}

// SaveHoldStats records what the instance breakers covered by hold holdID
// counted so far on collector (the cluster node id of the collector that
// stored their window reports; "" is accepted, the rows stored before
// issue 36). Each row replaces the previous one of its instance breaker
// and collector, never another collector's: stats are a collector's
// running totals, so a save retried after an error (or an ambiguous
// commit) writes the same figures again and nothing counts twice, and an
// instance that moves to another collector mid-hold adds that collector's
// row. HoldStats sums them. Errors: cbdash.ErrInvalid for missing names,
// ErrClosed, ctx's or a wrapped driver error.
func (s *Store) SaveHoldStats(ctx context.Context, holdID, collector string, stats []cbdash.HoldCounts) error {
	type row struct {
		c       cbdash.HoldCounts
		counts  []byte
		latency []byte
	}
	rs := make([]row, 0, len(stats))
	for _, c := range stats {
		if err := checkNames("hold id", holdID, "service", c.Service, "instance", c.Instance, "breaker", c.Breaker); err != nil {
			return err
		}
		counts, _ := json.Marshal(c.Counts)
		lat, _ := json.Marshal(c.Latency)
		rs = append(rs, row{c, counts, lat})
	}
	return s.w.do(ctx, &op{run: func(x *wtx) error {
		for _, r := range rs {
			if _, err := x.exec(`INSERT INTO hold_stats (hold_id, service, instance, breaker, collector, counts, latency, latency_sum_ms, windows)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (hold_id, service, instance, breaker, collector) DO UPDATE SET
				counts = excluded.counts, latency = excluded.latency, latency_sum_ms = excluded.latency_sum_ms, windows = excluded.windows`,
				holdID, r.c.Service, r.c.Instance, r.c.Breaker, collector, string(r.counts), string(r.latency), r.c.LatencySumMs, r.c.Windows); err != nil {
				return fmt.Errorf("store: hold stats: %w", err)
			}
		}
		return nil
	}})
}

// HoldStats returns what the instance breakers covered by hold holdID
// counted, summed over the collectors that counted them (SaveHoldStats),
// sorted by service, instance and breaker. Errors: ctx's or a wrapped
// driver error.
func (s *Store) HoldStats(ctx context.Context, holdID string) ([]cbdash.HoldCounts, error) {
	by, err := s.HoldStatsByCollector(ctx, holdID)
	if err != nil {
		return nil, err
	}
	out := []cbdash.HoldCounts{}
	for _, rows := range by {
		out = append(out, rows...)
	}
	return cbdash.MergeHoldCounts(out), nil
}

// HoldStatsByCollector returns the rows of hold holdID's statistics by
// the collector that saved them (SaveHoldStats), each collector's sorted
// by service, instance and breaker; an empty map when none are stored.
// Errors: ctx's or a wrapped driver error.
func (s *Store) HoldStatsByCollector(ctx context.Context, holdID string) (map[string][]cbdash.HoldCounts, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT collector, service, instance, breaker, counts, latency, latency_sum_ms, windows
		FROM hold_stats WHERE hold_id = $1 ORDER BY collector, service, instance, breaker`, holdID)
	if err != nil {
		return nil, fmt.Errorf("store: hold stats: %w", err)
	}
	defer rows.Close()
	out := map[string][]cbdash.HoldCounts{}
	for rows.Next() {
		var c cbdash.HoldCounts
		var collector, counts, lat string
		if err := rows.Scan(&collector, &c.Service, &c.Instance, &c.Breaker, &counts, &lat, &c.LatencySumMs, &c.Windows); err != nil {
			return nil, fmt.Errorf("store: hold stats: %w", err)
		}
		if err := json.Unmarshal([]byte(counts), &c.Counts); err != nil {
			return nil, fmt.Errorf("store: hold stats counts: %w", err)
		}
		if err := json.Unmarshal([]byte(lat), &c.Latency); err != nil {
			return nil, fmt.Errorf("store: hold stats latency: %w", err)
		}
		out[collector] = append(out[collector], c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: hold stats: %w", err)
	}
	return out, nil
}

// ApplyHold records deliveries, in order, in one store write (one
// transaction): what CreateCommand (or SetCommandTarget for a command
// already stored) and AddHoldCoverage would record for each, without a
// group commit per row. It writes all of them or none. Errors:
// cbdash.ErrInvalid as CreateCommand, SetCommandTarget and
// AddHoldCoverage (nothing is written); cbdash.ErrNotFound when a
// coverage row names a hold that is not stored (nothing is written);
// ErrClosed, ctx's or a wrapped driver error.
//
// The targets and coverage rows are written in multi-row statements
// (applyRows), a few a chunk of a fleet-wide hold instead of two a
// delivery: the writer, which every hello's record waits for, is busy
// a few milliseconds a chunk, not tens.
func (s *Store) ApplyHold(ctx context.Context, deliveries []cbdash.HoldDelivery) error {
	for _, d := range deliveries {
		if err := checkDelivery(d); err != nil {
			return err
		}
	}
	if len(deliveries) == 0 {
		return nil
	}
	return s.w.do(ctx, &op{prompt: true, run: func(x *wtx) error {
		stored := make(map[string]bool) // command ids known to be stored
		holds := make(map[string]bool)  // hold ids known to be stored
		for _, d := range deliveries {
			if err := x.ensureDelivery(d, stored, holds); err != nil {
				return err
			}
		}
		return x.applyRows(deliveries)
	}})
}

// checkDelivery checks what ApplyHold is given for one delivery.
func checkDelivery(d cbdash.HoldDelivery) error {
	c := d.Command
	if err := checkNames("id", c.ID, "service", c.Service, "breaker", c.Breaker); err != nil {
		return err
	}
	if !protocol.ValidAction(c.Action) {
		return fmt.Errorf("%w: unknown action %q", cbdash.ErrInvalid, c.Action)
	}
	if err := checkTarget(d.Target); err != nil {
		return err
	}
	if cv := d.Coverage; cv != nil {
		return checkNames("service", cv.Service, "instance", cv.Instance, "breaker", cv.Breaker, "command id", cv.CommandID,
			"hold id", c.HoldID)
	}
	return nil
}

// ensureDelivery writes what delivery d's rows refer to: its command,
// unless stored, and checks that the hold of its coverage row is stored;
// stored and holds are the command and hold ids already found (or
// written) in this transaction.
func (x *wtx) ensureDelivery(d cbdash.HoldDelivery, stored, holds map[string]bool) error {
	c := d.Command
	if !stored[c.ID] {
		n, err := x.count("SELECT count(*) FROM commands WHERE id = $1", c.ID)
		if err != nil {
			return fmt.Errorf("store: apply hold: %w", err)
		}
		if n == 0 {
			if _, err := x.exec(insertCommand, c.ID, c.Service, c.Breaker, c.Action, c.Instance, c.Share,
				c.TTL.Milliseconds(), c.Reason, c.Actor, ms(c.IssuedAt), ms(c.ExpiresAt), c.HoldID); err != nil {
				return fmt.Errorf("store: apply hold: %w", err)
			}
		}
		stored[c.ID] = true
	}
	if d.Coverage == nil || holds[c.HoldID] {
		return nil
	}
	n, err := x.count("SELECT count(*) FROM holds WHERE id = $1", c.HoldID)
	if err != nil {
		return fmt.Errorf("store: apply hold: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: hold %q", cbdash.ErrNotFound, c.HoldID)
	}
	holds[c.HoldID] = true
	return nil
}

// applyRows writes the targets and coverage rows of deliveries as
// putTarget and insertCoverage would, one after another, but in
// multi-row statements. A row that replaces one written before it in
// the same list is merged into it first (one statement may not upsert
// a row twice on PostgreSQL): a target's last delivery wins; a coverage
// row keeps its first JoinedLate and takes its last command id and
// time, as insertCoverage's update does.
func (x *wtx) applyRows(deliveries []cbdash.HoldDelivery) error {
	type targetKey struct{ cmd, instance string }
	type coverKey struct {
		hold, service, instance, breaker string
		startedAt                        int64
	}
	targets := make(map[targetKey]int, len(deliveries)) // row index in targetArgs
	covers := make(map[coverKey]int, len(deliveries))   // row index in coverArgs
	targetArgs, coverArgs := make([]any, 0, 6*len(deliveries)), make([]any, 0, 8*len(deliveries))
	for _, d := range deliveries {
		c, t := d.Command, d.Target
		row := []any{c.ID, t.Instance, t.Status, t.State, t.Error, ms(t.At)}
		if i, ok := targets[targetKey{c.ID, t.Instance}]; ok {
			copy(targetArgs[6*i:], row)
		} else {
			targets[targetKey{c.ID, t.Instance}] = len(targetArgs) / 6
			targetArgs = append(targetArgs, row...)
		}
		cv := d.Coverage
		if cv == nil {
			continue
		}
		k := coverKey{c.HoldID, cv.Service, cv.Instance, cv.Breaker, cv.StartedAt}
		if i, ok := covers[k]; ok {
			coverArgs[8*i+5], coverArgs[8*i+6] = cv.CommandID, ms(cv.CoveredAt)
			continue
		}
		covers[k] = len(coverArgs) / 8
		coverArgs = append(coverArgs, c.HoldID, cv.Service, cv.Instance, cv.Breaker, cv.StartedAt, cv.CommandID,
			ms(cv.CoveredAt), cv.JoinedLate)
	}
	if err := x.insertRows(6, targetArgs, upsertTargets); err != nil {
		return fmt.Errorf("store: command targets: %w", err)
	}
	if err := x.insertRows(8, coverArgs, upsertCoverage); err != nil {
		return fmt.Errorf("store: apply hold: %w", err)
	}
	return nil
}

// upsertTargets records the command targets of the rows values
// (command id, instance, status, state, error, at), replacing those of
// the same command and instance.
func upsertTargets(values string) string {
	return `INSERT INTO command_targets (command_id, instance, status, state, error, at) VALUES ` + values + `
		ON CONFLICT (command_id, instance) DO UPDATE SET status = excluded.status, state = excluded.state,
		error = excluded.error, at = excluded.at`
}

// upsertCoverage is insertCoverage's statement for the rows values
// (hold id, service, instance, breaker, started at, command id, covered
// at, joined late).
func upsertCoverage(values string) string {
	return `INSERT INTO hold_coverage (hold_id, service, instance, breaker, started_at, command_id, covered_at, joined_late)
	VALUES ` + values + ` ON CONFLICT (hold_id, service, instance, breaker, started_at) DO UPDATE SET
	command_id = excluded.command_id, covered_at = excluded.covered_at`
}

// count runs a query of one count in the transaction.
func (x *wtx) count(query string, args ...any) (int, error) {
	q, err := x.queryRow(query, args...)
	if err != nil {
		return 0, err
	}
	var n int
	err = q.Scan(&n)
	return n, err
}
