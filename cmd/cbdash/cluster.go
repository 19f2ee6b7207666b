package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/cluster"
	"github.com/cbdash/cbdash/internal/store"
)

// busBuffer is how many messages (each up to 8000 bytes) a subscriber of
// the bus may fall behind before it is dropped and resynchronises from the
// store: room for a few seconds of a thousand other agents' updates.
const busBuffer = 8192

// openBus returns the bus of the collectors sharing the database db: on
// PostgreSQL the database's LISTEN/NOTIFY and advisory locks (every
// collector started with the same --db joins), else the single node's.
func openBus(ctx context.Context, db string, log *slog.Logger, clk clock.Clock) (cluster.Bus, error) {
	bus, err := cluster.ForStore(ctx, db, cluster.Config{Logger: log, Clock: clk, SubscriberBuffer: busBuffer})
	if err != nil {
		return nil, fmt.Errorf("joining the collectors of %s (flag --db): %w", store.MaskDSN(db), err)
	}
	return bus, nil
}

// leadRetry is the wait before a singleton that failed is run again while
// this collector still leads it.
const leadRetry = time.Second

// lead wraps a singleton's loop: it runs only while this collector leads
// name on the bus (one collector of the deployment at a time), and again
// after a failure while it still leads. The returned loop returns nil when
// ctx ends.
func (s *server) lead(name string, run func(context.Context) error) func(context.Context) error {
	bus, log := s.bus, s.log
	return func(ctx context.Context) error {
		return bus.Lead(ctx, name, func(lctx context.Context) {
			for lctx.Err() == nil {
				err := run(lctx)
				if lctx.Err() != nil {
					return
				}
				log.Warn("a singleton stopped; running it again", "singleton", name, "err", err, "in", leadRetry)
				t := clock.NewTimer(s.clk, leadRetry)
				select {
				case <-t.C:
				case <-lctx.Done():
				}
				t.Stop()
			}
		})
	}
}

// ruleReload is how often the leader of alert delivery reads the rules
// again: a rule created or changed through another collector's API
// reaches the engine of the one that delivers within it.
const ruleReload = 2 * time.Second

// alertsWithRules runs alert delivery, reading the rules again every
// ruleReload while it runs.
func (s *server) alertsWithRules(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick, stop := s.clk.NewTicker(ruleReload)
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick:
				if err := s.alerts.Reload(ctx); err != nil && ctx.Err() == nil {
					s.log.Warn("reading the alert rules again", "err", err)
				}
			}
		}
	}()
	defer func() {
		cancel()
		<-done
	}()
	return s.alerts.Run(ctx)
}
