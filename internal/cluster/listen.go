package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cbdash/cbdash/internal/dsn"
)

// connect opens a connection of its own for role, named in
// pg_stat_activity as cbdash-<role>-<node id><namespace> (application_name).
func (p *Postgres) connect(ctx context.Context, role string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(p.cfg.URL)
	if err != nil {
		return nil, dsn.MaskError(p.cfg.URL, err)
	}
	cc.RuntimeParams["application_name"] = "cbdash-" + role + "-" + p.cfg.NodeID + p.ns
	return pgx.ConnectConfig(ctx, cc)
}

// listenLoop keeps the listening connection up: it reports the first
// connection's outcome on ready (Open fails when it does not come up),
// then reconnects after Config.Reconnect each time it is lost, telling
// subscribers of the gap.
func (p *Postgres) listenLoop(ready chan<- error) {
	defer p.wg.Done()
	first := true // no connection has been up yet
	for {
		err := p.listen(p.ctx, func() {
			if first {
				first = false
				ready <- nil
			} else {
				p.subs.gap(p.cfg.NodeID)
			}
		})
		if first {
			ready <- err
			return
		}
		if p.ctx.Err() != nil {
			return
		}
		p.log.Warn("the cluster's listening connection was lost; reconnecting", "err", err, "in", p.cfg.Reconnect)
		if !p.wait(p.ctx, p.cfg.Reconnect) {
			return
		}
	}
}

// listen runs one listening connection: LISTEN on the bus's channel and
// this node's own, write this node's claims with the connection's id, then
// deliver notifications until the connection fails or ctx ends.
func (p *Postgres) listen(ctx context.Context, up func()) error {
	conn, err := p.connect(ctx, "listen")
	if err != nil {
		return err
	}
	defer func() {
		p.mu.Lock()
		p.listener = listenerID{}
		p.mu.Unlock()
		_ = conn.Close(context.WithoutCancel(ctx))
	}()
	for _, ch := range []string{p.busChan(), p.nodeChan(p.cfg.NodeID)} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	l := listenerID{pid: conn.PgConn().PID()}
	if err := conn.QueryRow(ctx, `SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&l.start); err != nil {
		return fmt.Errorf("reading the connection's start: %w", err)
	}
	p.mu.Lock()
	p.listener = l
	claims := make([][2]string, 0, len(p.claims))
	for k := range p.claims {
		claims = append(claims, k)
	}
	p.mu.Unlock()
	for _, k := range claims {
		if err := p.writeClaim(ctx, conn, l, k[0], k[1]); err != nil {
			return err
		}
	}
	up()
	own := `{"f":"` + p.cfg.NodeID + `",` // how this node's envelopes begin (node ids need no escaping)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if strings.HasPrefix(n.Payload, own) {
			continue // this node's own publication, not decoded
		}
		if p.peers.Load() <= 0 {
			p.peers.Store(1) // another node spoke: at least one peer, before the next count
		}
		var env envelope
		if err := json.Unmarshal([]byte(n.Payload), &env); err != nil {
			p.log.Warn("a malformed cluster message was ignored", "channel", n.Channel, "err", err)
			continue
		}
		if env.From == p.cfg.NodeID {
			continue // this node's own publication: applied here already
		}
		m := Message{Channel: env.Channel, From: env.From, Payload: []byte(env.Data)}
		if env.Ref != 0 {
			// Read on this connection, before the next notification: the
			// order of the messages is kept.
			if err := conn.QueryRow(ctx, `SELECT body FROM cbdash_cluster_payloads WHERE id = $1`, env.Ref).Scan(&m.Payload); err != nil {
				p.log.Warn("a cluster message sent by reference could not be read", "ref", env.Ref, "err", err)
				m = Message{Channel: env.Channel, From: env.From, Gap: true}
			}
		}
		p.subs.deliver(m)
	}
}

// peersLoop counts, every LeaderRetry, the other nodes listening in the
// database (their listening connections in pg_stat_activity), for Peers,
// and keeps the ids of those of this schema, for PeerIDs.
func (p *Postgres) peersLoop() {
	defer p.wg.Done()
	for {
		ids, n, err := p.listening()
		if err != nil {
			n, ids = -1, nil // unknown: publish
		}
		p.peers.Store(int64(n))
		p.peerIDs.Store(&ids)
		if !p.wait(p.ctx, p.cfg.LeaderRetry) {
			return
		}
	}
}

// listening returns the ids of the other nodes of this schema listening
// in the database, and how many other nodes listen in it (any schema).
func (p *Postgres) listening() (ids []string, n int, err error) {
	ctx, cancel := context.WithTimeout(p.ctx, max(p.cfg.LeaderRetry, time.Second))
	defer cancel()
	rows, err := p.pool.Query(ctx, `SELECT application_name FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'cbdash-listen-%' AND application_name <> $1`,
		"cbdash-listen-"+p.cfg.NodeID+p.ns)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, 0, err
		}
		n++
		id := strings.TrimPrefix(name, "cbdash-listen-")
		if p.ns != "" {
			var ok bool
			if id, ok = strings.CutSuffix(id, p.ns); !ok {
				continue // another schema's
			}
		} // in public, other schemas' nodes are listed too (with their suffix): an id too many, never one missing
		ids = append(ids, id)
	}
	return ids, n, rows.Err()
}

// PeerIDs returns the ids of the other nodes of this schema listening at
// the last count (in the schema public, those of other schemas too) (every LeaderRetry); ok is false when not known (before
// the first count, or it failed). A node's id is Message.From of what it
// sends.
func (p *Postgres) PeerIDs() (ids []string, ok bool) {
	v := p.peerIDs.Load()
	if v == nil || p.peers.Load() < 0 {
		return nil, false
	}
	return *v, true
}

// Peers returns how many other nodes were listening in the database at
// the last count (every LeaderRetry; nodes of other schemas may be
// included), or -1 when unknown. A node with no peer may skip publishing
// what only others would read: a node that joins reads the store first.
func (p *Postgres) Peers() int { return int(p.peers.Load()) }
