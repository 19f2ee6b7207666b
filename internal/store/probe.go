package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Probe reports whether the store can store agents' batches now: nil, or
// why not. It runs, on the writer, every statement a hello and a batch
// write (SaveHello and SaveBatch: services, instances, instance_runs,
// breakers, transitions, command_targets, gaps, dependencies, the
// windows_second rows, instance_minutes) for a synthetic agent
// (service ProbeService) inside a transaction that is rolled back, so a
// renamed column or a dropped table fails it while nothing of it is ever
// stored; then it commits the one-row write of store_health (which a read-only
// file, a full disk or an unreachable PostgreSQL fail). A nil answer
// clears the writer's failing state (Writable is nil again at once). It
// does not read or change the writer's caches. Errors: the first failing
// step's, wrapped ("store: probe: ..."), ErrClosed after Close, ctx's.
func (s *Store) Probe(ctx context.Context) error {
	if err := s.probe(ctx); err != nil {
		return err
	}
	// The commit of store_health cleared the writer's failing state
	// (finish); Writable's cached answer goes too.
	s.healthMu.Lock()
	s.healthAt, s.healthErr = time.Time{}, nil
	s.healthMu.Unlock()
	return nil
}

// probe is Probe without the reset of Writable's cache.
func (s *Store) probe(ctx context.Context) error {
	now := s.opts.Clock.Now().UnixMilli()
	h, b := probeHello(now), probeBatch(now)
	labels, _ := json.Marshal(h.Labels)
	configs := make([][]byte, len(h.Breakers))
	for i, br := range h.Breakers {
		configs[i], _ = json.Marshal(br)
	}
	causes, err := transitionCauses(&b)
	if err != nil {
		return err
	}
	err = s.w.do(ctx, &op{dryRun: true, probe: true, run: func(x *wtx) error {
		if _, err := x.saveHello(&h, string(labels), configs, `["probe"]`, now); err != nil {
			return err
		}
		_, err := x.saveBatch(h.Service, h.Instance, h.StartedAt, &b, causes, now)
		return err
	}})
	if err != nil {
		return fmt.Errorf("store: probe: %w", err)
	}
	if err := s.w.do(ctx, &op{run: func(x *wtx) error {
		_, err := x.exec(`INSERT INTO store_health (id, checked_at) VALUES (1, $1)
			ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at`, now)
		return err
	}}); err != nil {
		return fmt.Errorf("store: probe: cannot commit: %w", err)
	}
	return nil
}

// ProbeService is the service of Probe's synthetic agent (never stored).
const ProbeService = "cbdash.store-probe"

func probeHello(now int64) protocol.Hello {
	return protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: ProbeService, Instance: "probe",
		SDKVersion: "probe", StartedAt: now, Labels: map[string]string{"probe": "1"},
		Breakers: []protocol.BreakerConfig{{Name: "probe"}}}
}

// probeBatch is a batch with one of everything SaveBatch writes: a
// transition (with its cause), a command result, a gap and a window
// report.
func probeBatch(now int64) protocol.Batch {
	start := now - now%1000
	return protocol.Batch{Type: protocol.TypeBatch, Seq: 1, SentAt: now,
		Transitions: []protocol.Transition{{Breaker: "probe", From: protocol.StateClosed, To: protocol.StateOpen, At: now,
			Generation: 1, Cause: protocol.Cause{Kind: protocol.CauseFailureRate, Reason: "store probe"}}},
		CommandResults: []protocol.CommandResult{{ID: "probe", Breaker: "probe", OK: true, State: protocol.StateOpen, At: now}},
		Dropped:        &protocol.Dropped{Windows: 1, Calls: 1, Lost: []protocol.LostSpan{{Breaker: "probe", Start: start - 1000, End: start, Calls: 1}}},
		Windows: []protocol.Window{{Breaker: "probe", Start: start, Millis: 1000, State: protocol.StateOpen,
			Counts: protocol.Counts{Admitted: 1, Failures: 1, Errors: 1}, Latency: make([]int64, protocol.NumLatencyBuckets)}}}
}

// dryRun runs op o alone in a transaction of its own, flushing what it
// staged (the group's statements: windows, last seqs, instance minutes)
// as a group would, and rolls the transaction back. The writer's caches
// are set aside meanwhile and restored afterwards: nothing o caches (ids
// of rows that are rolled back) outlives it. Writer goroutine only.
func (w *writer) dryRun(o *op) {
	saved := w.c
	w.c = cache{written: saved.written}
	w.c.reset()
	err := func() error {
		ctx := context.Background()
		tx, err := w.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("store: begin: %w", err)
		}
		defer tx.Rollback()
		x := newWtx(ctx, w, tx)
		defer x.close()
		defer func() {
			if cap(x.im) <= maxIMBuf {
				w.imBuf = x.im[:0]
			}
		}()
		if err := w.d.beginGroup(x); err != nil {
			return fmt.Errorf("store: begin: %w", err)
		}
		if err := x.savepoint(o.run); err != nil {
			return err
		}
		if err := x.flush(); err != nil {
			return fmt.Errorf("store: write windows: %w", err)
		}
		return x.writeOwnInstanceMinutes()
	}()
	w.c = saved
	o.err = err
	w.finish([]*op{o}, true)
}
