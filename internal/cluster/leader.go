package cluster

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lead runs fn while this node holds the advisory lock of name (see Bus).
// It holds the lock on a connection of its own: tries it every
// LeaderRetry while another node has it, and, while leading, checks the
// connection every LeaderCheck; when the connection is lost fn's context
// is cancelled, and once fn has returned Lead tries again. It returns nil
// when ctx ends or the bus is closed, after fn has returned.
func (p *Postgres) Lead(ctx context.Context, name string, fn func(context.Context)) error {
	if err := checkChannel(name); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	key := lockKey(name + p.ns)
	for ctx.Err() == nil {
		err := p.leadOn(ctx, name, key, fn)
		if ctx.Err() != nil {
			break
		}
		p.log.Warn("the connection of a singleton's lock was lost; reconnecting", "singleton", name, "err", err, "in", p.cfg.Reconnect)
		if !p.wait(ctx, p.cfg.Reconnect) {
			break
		}
	}
	return nil
}

// leadOn runs one connection of Lead: it tries the lock until it has it,
// then leads until the connection fails or ctx ends.
func (p *Postgres) leadOn(ctx context.Context, name string, key int64, fn func(context.Context)) error {
	conn, err := p.connect(ctx, "lead-"+name)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
			return err
		}
		if got {
			return p.leadWhile(ctx, conn, name, fn)
		}
		if !p.wait(ctx, p.cfg.LeaderRetry) {
			return ctx.Err()
		}
	}
}

// leadWhile runs fn while conn, which holds the lock, is alive. When ctx
// ends the connection is closed by the caller, which releases the lock.
func (p *Postgres) leadWhile(ctx context.Context, conn *pgx.Conn, name string, fn func(context.Context)) error {
	p.setLeading(name, true)
	defer p.setLeading(name, false)
	p.log.Info("leading", "singleton", name)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(lctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	check, stopCheck := p.cfg.Clock.NewTicker(p.cfg.LeaderCheck)
	defer stopCheck()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-check:
			pctx, pcancel := context.WithTimeout(ctx, max(p.cfg.LeaderCheck, time.Second))
			err := conn.Ping(pctx)
			pcancel()
			if err != nil {
				p.log.Warn("lost the lock of a singleton", "singleton", name, "err", err)
				return err
			}
		}
	}
}

func (p *Postgres) setLeading(name string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.leading[name] = true
	} else {
		delete(p.leading, name)
	}
}
