package web

import (
	"bytes"
	"context"
	"errors"
	"hash/fnv"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/web/templates"
)

const (
	liveWriteTimeout = 5 * time.Second
	liveSparkBudget  = 10 * time.Millisecond
	resubscribePause = time.Second
	chartsEvery      = 5 * time.Second // how often live charts are redrawn
)

// liveView is what one open page wants pushed: flush renders the
// fragments changed since the last flush (nil when nothing visible
// changed). Fragments are top-level elements with the ids of the page's
// elements; the htmx websocket extension swaps them in place (out of
// band). A view keeps what changed between flushes as flags, sets of keys
// or versions, never as rendered bytes: a flush that waits (the socket is
// still writing the last message) sends the latest state of everything
// that changed meanwhile, once. A view is a subscribedView or an
// indexedView (liveFeed says which).
type liveView interface {
	flush(ctx context.Context) ([]byte, error)
}

// liveFeed is the view of one socket and how it is fed: exactly one of
// indexed (it reads the shared fleetIndex) and subscribed (it follows a
// subscription of its own) is set.
type liveFeed struct {
	indexed    indexedView
	subscribed subscribedView
}

// subscribedView follows its own subscription to the collector: reset
// renders every live fragment of the page from a fresh snapshot (the
// collector's views, shared: read-only), event notes a change.
type subscribedView interface {
	liveView
	reset(ctx context.Context, snapshot []*cbdash.Dependency) ([]byte, error)
	event(ev cbdash.Event)
}

// indexedView reads the server's shared fleetIndex at its flushes
// instead of subscribing (the overview): start renders every live
// fragment of the page once the index is ready.
type indexedView interface {
	liveView
	start(ctx context.Context, ix *fleetIndex) ([]byte, error)
}

// subscribe subscribes to the collector, sharing its views.
func (s *Server) subscribe() ([]*cbdash.Dependency, <-chan cbdash.Event, func()) {
	return s.col.SubscribeViews()
}

func withView(q url.Values, view string) url.Values {
	q.Set("view", view)
	return q
}

// live is the page's websocket: GET /live?view=overview|dependency|audit|
// incident|incidents plus the page's own query (the overview's filter and
// page: one page of at most tilesPerPage tiles is sent, never the whole
// fleet). Origins other than the page's host are refused by
// websocket.Accept. The connection lives in this handler: it subscribes
// to the collector (the overview reads the shared fleetIndex instead),
// coalesces changes and pushes at most one message per LiveInterval;
// when the collector drops it as too slow it resubscribes and sends a
// full refresh.
//
// What a socket costs is bounded whatever its client does. The overview
// sockets share one index of the fleet (fleetIndex: one subscription to
// the collector) and each keeps only its page. Every socket's messages
// are written by a goroutine of its own (liveWriter), one at a time, and
// while one is being written the socket renders nothing: its view
// collects what changed, each tile's or part's latest state replacing the
// one before (as the collector's subscribers keep one view per
// dependency), and sends that once the write is done. So a socket holds
// at most one rendered message (on the overview at most one page: 75-180
// KB at 50 tiles, depending on the names, labels and sparklines shown),
// never a queue, and its subscription does not lag behind a client that
// does not read. A write that takes longer than liveWriteTimeout (a
// client that stopped reading) closes the socket.
func (s *Server) live(c echo.Context) error {
	lv, err := s.liveViewFor(c)
	if err != nil {
		return err
	}
	release, refused := s.slots.take(liveSessionKey(c), c.RealIP())
	if release == nil {
		s.log.Info("live socket refused", "address", c.RealIP(), "reason", refused)
		return echo.NewHTTPError(http.StatusTooManyRequests, refused)
	}
	defer release()
	conn, err := websocket.Accept(c.Response(), c.Request(), nil)
	if err != nil {
		return nil // Accept has answered (403 for a foreign origin)
	}
	defer conn.CloseNow()
	ctx, revoked := s.whileAuthorized(conn.CloseRead(c.Request().Context()), c)
	err = s.pump(ctx, conn, lv)
	switch {
	case revoked():
		conn.Close(websocket.StatusPolicyViolation, "logged out: the session or token is no longer valid")
	case errors.Is(err, errShutdown):
		conn.Close(websocket.StatusServiceRestart, "server shutting down")
	case ctx.Err() == nil && err != nil:
		s.log.Debug("live socket ended", "err", err)
		conn.Close(websocket.StatusTryAgainLater, "live update failed")
	}
	return nil
}

var errShutdown = errors.New("server closed")

func (s *Server) liveViewFor(c echo.Context) (liveFeed, error) {
	v, err := s.subscribedViewFor(c)
	if err != nil || v != nil {
		return liveFeed{subscribed: v}, err
	}
	return liveFeed{indexed: &overviewLive{s: s, f: parseFilter(c.QueryParams())}}, nil
}

// subscribedViewFor is the view that follows a subscription of its own
// for the socket's ?view=; nil for the overview (an indexedView).
func (s *Server) subscribedViewFor(c echo.Context) (subscribedView, error) {
	q := c.QueryParams()
	switch q.Get("view") {
	case "overview":
		return nil, nil
	case "dependency":
		k := cbdash.DependencyKey{Service: q.Get("service"), Breaker: q.Get("breaker")}
		if _, err := s.col.Dependency(k); err != nil {
			return nil, err
		}
		sp, err := parseSpan(q, "1h", s.now())
		if err != nil {
			return nil, err
		}
		u := userOf(c)
		canOp := u != nil && !anonymous(c) && cbdash.RoleAllows(u.Role, cbdash.RoleOperator)
		page := maps.Clone(q)
		page.Del("view")
		return &dependencyLive{s: s, key: k, span: sp, canOp: canOp, paging: pagingOf(q), query: page}, nil
	case "audit":
		return &auditLive{s: s, service: q.Get("service")}, nil
	case "incident":
		is, err := s.incidents()
		if err != nil {
			return nil, err
		}
		id, err := strconv.ParseInt(q.Get("id"), 10, 64)
		if err != nil || id <= 0 {
			return nil, errorf(cbdash.ErrInvalid, "id must be an incident number")
		}
		inc, err := is.Incident(c.Request().Context(), id)
		if err != nil {
			return nil, err
		}
		return &incidentLive{s: s, is: is, id: id, key: inc.DependencyKey, page: s.page(c, "", "incidents")}, nil
	case "incidents":
		is, err := s.incidents()
		if err != nil {
			return nil, err
		}
		iq, err := parseIncidentQuery(q.Get)
		if err != nil {
			return nil, err
		}
		f := url.Values{}
		for _, k := range []string{"service", "breaker", "from", "to", "open"} {
			if v := q.Get(k); v != "" {
				f.Set(k, v)
			}
		}
		f.Set("fragment", "1")
		return &incidentsLive{s: s, is: is, q: iq, fragment: "/incidents?" + f.Encode()}, nil
	}
	return nil, errorf(cbdash.ErrInvalid, "view must be overview, dependency, audit, incident or incidents")
}

func (s *Server) pump(ctx context.Context, conn *websocket.Conn, lv liveFeed) error {
	w := s.startWriter(ctx, conn)
	defer w.stop()
	tick, stopTick := s.cfg.Clock.NewTicker(s.cfg.LiveInterval)
	defer stopTick()
	if lv.indexed != nil {
		return s.pumpIndexed(ctx, w, lv.indexed, tick)
	}
	sv := lv.subscribed
	for {
		if err := s.idleWriter(ctx, w); err != nil {
			return err
		}
		snapshot, events, cancel := s.subscribe()
		msg, err := sv.reset(ctx, snapshot)
		snapshot = nil // the view keeps what it needs of it
		if err != nil {
			w.release()
			cancel()
			return err
		}
		w.put(msg)
		err = s.follow(ctx, w, sv, events, tick)
		cancel()
		if err != nil {
			return err
		}
		// The collector dropped us as too slow (or is shutting down): pause,
		// then start again from a fresh snapshot. Real time: the pause
		// gives the process room, it is not a logical delay.
		pause := time.NewTimer(resubscribePause)
		select {
		case <-ctx.Done():
			pause.Stop()
			return ctx.Err()
		case <-s.done:
			pause.Stop()
			return errShutdown
		case <-pause.C:
		}
	}
}

// pumpIndexed sends iv's page once the server's fleet index is ready,
// then what changed at every tick the writer is idle, and at once when a
// dependency's state changes (a transition does not wait for the tick;
// while the writer is busy it is sent with the next flush, as any change).
func (s *Server) pumpIndexed(ctx context.Context, w *liveWriter, iv indexedView, tick <-chan time.Time) error {
	ix := s.fleetIndex()
	select {
	case <-ix.ready:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errShutdown
	}
	if err := s.idleWriter(ctx, w); err != nil {
		return err
	}
	msg, err := iv.start(ctx, ix)
	if err != nil {
		w.release()
		return err
	}
	w.put(msg)
	moved := ix.stateMoved()
	var held <-chan struct{} // w.idle while a state change waits for the writer
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errShutdown
		case <-w.done:
			return w.err
		case <-tick:
			if err := s.flushTo(ctx, w, iv); err != nil {
				return err
			}
		case <-moved:
			moved = ix.stateMoved()
			if !w.take() {
				s.slots.coalesced.Add(1)
				held = w.idle // sent as soon as the writer is done
				continue
			}
			if err := s.flushTaken(ctx, w, iv); err != nil {
				return err
			}
		case <-held: // the writer is ours
			held = nil
			if err := s.flushTaken(ctx, w, iv); err != nil {
				return err
			}
		}
	}
}

// flushTaken flushes lv into w, taken.
func (s *Server) flushTaken(ctx context.Context, w *liveWriter, lv liveView) error {
	msg, err := lv.flush(ctx)
	if err != nil {
		w.release()
		return err
	}
	w.put(msg)
	return nil
}

// flushTo flushes lv into w when w is idle; while w is still writing it
// renders nothing (lv keeps collecting) and counts the put-off flush.
func (s *Server) flushTo(ctx context.Context, w *liveWriter, lv liveView) error {
	if !w.take() {
		s.slots.coalesced.Add(1)
		return nil
	}
	return s.flushTaken(ctx, w, lv)
}

// idleWriter waits until w has written its message and takes it.
func (s *Server) idleWriter(ctx context.Context, w *liveWriter) error {
	select {
	case <-w.idle:
		return nil
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errShutdown
	}
}

// follow applies events until the channel closes (nil), the client
// leaves, the writer fails or the server closes (error). A tick while
// the writer is still busy renders nothing: the view keeps collecting,
// and a later tick sends it all.
func (s *Server) follow(ctx context.Context, w *liveWriter, lv subscribedView, events <-chan cbdash.Event, tick <-chan time.Time) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errShutdown
		case <-w.done:
			return w.err
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			lv.event(ev)
		case <-tick:
			if err := s.flushTo(ctx, w, lv); err != nil {
				return err
			}
		}
	}
}

// liveWriter writes one socket's messages on a goroutine of its own, one
// at a time. The socket's loop hands it a message only while it is idle
// (take, then put or release), so it never holds more than the message
// it is writing; the bytes handed to writers and not yet written are
// counted in liveSlots.queued.
type liveWriter struct {
	s    *Server
	conn *websocket.Conn
	idle chan struct{} // holds a token while the writer waits for a message
	msgs chan []byte   // the message handed over (room for one)
	done chan struct{} // closed when the writer has stopped
	err  error         // why it stopped (nil: stop); read after done
}

func (s *Server) startWriter(ctx context.Context, conn *websocket.Conn) *liveWriter {
	w := &liveWriter{s: s, conn: conn, idle: make(chan struct{}, 1), msgs: make(chan []byte, 1), done: make(chan struct{})}
	w.idle <- struct{}{}
	go w.run(ctx)
	return w
}

func (w *liveWriter) run(ctx context.Context) {
	defer close(w.done)
	for msg := range w.msgs {
		err := send(ctx, w.conn, msg)
		w.s.slots.queued.Add(-int64(len(msg)))
		if err != nil {
			w.err = err
			return
		}
		w.idle <- struct{}{}
	}
}

// take takes the writer when it is idle; false when it is writing.
func (w *liveWriter) take() bool {
	select {
	case <-w.idle:
		return true
	default:
		return false
	}
}

// put gives the taken writer msg to write; an empty msg gives it back.
func (w *liveWriter) put(msg []byte) {
	if len(msg) == 0 {
		w.release()
		return
	}
	w.s.slots.hold(len(msg))
	w.msgs <- msg
}

// release gives the taken writer back without a message.
func (w *liveWriter) release() { w.idle <- struct{}{} }

// stop lets the writer finish the message it is writing (at most
// liveWriteTimeout) and waits for it.
func (w *liveWriter) stop() {
	close(w.msgs)
	<-w.done
}

func send(ctx context.Context, conn *websocket.Conn, msg []byte) error {
	ctx, cancel := context.WithTimeout(ctx, liveWriteTimeout)
	defer cancel()
	return conn.Write(ctx, websocket.MessageText, msg)
}

func renderTo(ctx context.Context, buf *bytes.Buffer, comps ...templ.Component) error {
	for _, c := range comps {
		if err := c.Render(ctx, buf); err != nil {
			return err
		}
	}
	return nil
}

// overviewLive keeps one page of the overview's tiles current (the
// filter's page, at most tilesPerPage tiles), and its counters, from the
// server's fleetIndex. A tile is sent only when its rendering changed;
// when the page's set of tiles changes (a dependency matched or not, a
// new one, a state change that moves tiles across the page's edge), the
// page is sent again, still one page. It holds only its page: the keys,
// the views last drawn and the hashes of the tiles last sent.
type overviewLive struct {
	s  *Server
	f  filter
	ix *fleetIndex
	// ver and gen are the index's as of the last flush: ver moved means
	// something changed, gen moved that the page's tiles may have.
	ver, gen uint64
	keys     []cbdash.DependencyKey // the page's, in order
	seen     []*cbdash.Dependency   // the view of each last drawn
	sent     []uint64               // hash of each tile last sent
	order    string                 // the tile order last sent
	pager    templates.TilePager    // the pager last sent
	// alerts is the firing count last sent (-1: none sent yet).
	alerts int
	// fleetAt is when the fleet line was last sent: it is sent again
	// when something changed, at most every fleetEvery.
	fleetAt time.Time
}

// fleetEvery bounds how often a live overview re-reads the fleet line.
const fleetEvery = 2 * time.Second

// fleetLine renders the overview's fleet line when fleetEvery has passed
// since it was last sent.
func (o *overviewLive) fleetLine(ctx context.Context, buf *bytes.Buffer) error {
	now := o.s.now()
	if now.Sub(o.fleetAt) < fleetEvery {
		return nil
	}
	f, err := o.s.fleetTimeline(ctx, now)
	if err != nil || f == nil {
		return err
	}
	o.fleetAt = now
	return renderTo(ctx, buf, templates.FleetTimelineView(*f))
}

func (o *overviewLive) start(ctx context.Context, ix *fleetIndex) ([]byte, error) {
	o.ix = ix
	return o.grid(ctx)
}

// grid renders the counters and the page's tiles as they are now.
func (o *overviewLive) grid(ctx context.Context) ([]byte, error) {
	all, ver, gen := o.ix.all()
	return o.draw(ctx, pageOf(all, o.f), ver, gen)
}

// draw renders the counters and page pg's tiles (of the index at ver and
// gen), and remembers what it sent.
func (o *overviewLive) draw(ctx context.Context, pg overviewPage, ver, gen uint64) ([]byte, error) {
	shown := valuesOf(pg.Deps)
	sparks := o.s.sparks.get(ctx, keysOf(shown), liveSparkBudget)
	gs := groupsOf(pg, o.f, sparks, o.s.trips(ctx, shown), o.s.now())
	o.keys = keysOf(shown)
	o.seen = slices.Clone(pg.Deps)
	o.sent = make([]uint64, 0, len(pg.Deps))
	var tb bytes.Buffer
	for _, g := range gs {
		for _, t := range g.Tiles {
			tb.Reset()
			if err := templates.TileView(t).Render(ctx, &tb); err != nil {
				return nil, err
			}
			o.sent = append(o.sent, hash(tb.Bytes()))
		}
	}
	o.ver, o.gen = ver, gen
	o.order = templates.TileIDs(gs)
	o.pager = pager(pg, o.f)
	var buf bytes.Buffer
	if err := templates.FleetCounters(o.ix.counters()).Render(ctx, &buf); err != nil {
		return nil, err
	}
	if err := templates.Groups(gs, o.pager).Render(ctx, &buf); err != nil {
		return nil, err
	}
	o.alerts = -1
	if err := o.alertsCounter(ctx, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// alertsCounter renders the firing count when it changed since the last
// one sent.
func (o *overviewLive) alertsCounter(ctx context.Context, buf *bytes.Buffer) error {
	a := o.s.alertsCount()
	if a == nil || a.Firing == o.alerts {
		return nil
	}
	o.alerts = a.Firing
	return renderTo(ctx, buf, templates.AlertsCounter(*a))
}

func (o *overviewLive) flush(ctx context.Context) ([]byte, error) {
	var buf bytes.Buffer
	if err := o.alertsCounter(ctx, &buf); err != nil {
		return nil, err
	}
	ver, gen := o.ix.versions()
	if ver == o.ver {
		return buf.Bytes(), nil
	}
	if gen != o.gen {
		all, v, g := o.ix.all()
		pg := pageOf(all, o.f)
		if !o.same(pg) {
			return o.draw(ctx, pg, v, g)
		}
		ver, o.gen = v, g
		if err := o.sendOrder(ctx, &buf, pg); err != nil {
			return nil, err
		}
		if p := pager(pg, o.f); p != o.pager {
			o.pager = p
			if err := renderTo(ctx, &buf, templates.TilePagerView(p, "tile-pager"), templates.TilePagerView(p, "tile-pager-end")); err != nil {
				return nil, err
			}
		}
	}
	o.ver = ver
	if err := o.fleetLine(ctx, &buf); err != nil {
		return nil, err
	}
	if err := templates.FleetCounters(o.ix.counters()).Render(ctx, &buf); err != nil {
		return nil, err
	}
	var idx []int
	var changed []cbdash.Dependency
	for i, d := range o.ix.views(o.keys) {
		if d != nil && d != o.seen[i] {
			o.seen[i] = d
			idx = append(idx, i)
			changed = append(changed, *d)
		}
	}
	if len(idx) == 0 {
		return buf.Bytes(), nil
	}
	sparks := o.s.sparks.get(ctx, keysOf(changed), liveSparkBudget)
	tr := o.s.trips(ctx, changed)
	var tb bytes.Buffer
	for j, i := range idx {
		k := o.keys[i]
		tb.Reset()
		if err := templates.TileView(tile(changed[j], sparks[k], tr[k], o.s.now())).Render(ctx, &tb); err != nil {
			return nil, err
		}
		if h := hash(tb.Bytes()); h != o.sent[i] {
			o.sent[i] = h
			buf.Write(tb.Bytes())
		}
	}
	return buf.Bytes(), nil
}

// same reports whether page pg has the tiles shown (in any order).
func (o *overviewLive) same(pg overviewPage) bool {
	if len(pg.Deps) != len(o.keys) {
		return false
	}
	shown := make(map[cbdash.DependencyKey]bool, len(o.keys))
	for _, k := range o.keys {
		shown[k] = true
	}
	for _, d := range pg.Deps {
		if !shown[d.DependencyKey] {
			return false
		}
	}
	return true
}

// sendOrder renders the order of page pg's tiles when it differs from
// the last sent (grouped tiles keep it within their group).
func (o *overviewLive) sendOrder(ctx context.Context, buf *bytes.Buffer, pg overviewPage) error {
	ids := make([]string, len(pg.Deps))
	for i, d := range pg.Deps {
		ids[i] = tileID(d.DependencyKey)
	}
	order := strings.Join(ids, " ")
	if order == o.order {
		return nil
	}
	o.order = order
	return templates.TileOrder(order).Render(ctx, buf)
}

func hash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// dependencyLive keeps a dependency page's header, instances, transition
// log and commands current, and redraws its charts every chartsEvery
// while the range ends now.
type dependencyLive struct {
	s                   *Server
	key                 cbdash.DependencyKey
	span                span
	dep                 cbdash.Dependency
	head, trans, cmds   bool
	lastHead, lastInsts uint64
	canOp               bool      // the page has the operator panel: its instance list is kept live
	lastOpInsts         uint64    // hash of the instance list last sent
	chartsAt            time.Time // when the charts were last drawn
	paging              instancePaging
	query               url.Values // the page's own query (for the instance table's links)
}

func (d *dependencyLive) reset(ctx context.Context, snapshot []*cbdash.Dependency) ([]byte, error) {
	for _, x := range snapshot {
		if x.DependencyKey == d.key {
			d.dep = *x
		}
	}
	d.head, d.trans, d.cmds = true, true, true
	d.lastHead, d.lastInsts, d.lastOpInsts = 0, 0, 0
	d.chartsAt = d.s.now() // the page was just drawn
	return d.flush(ctx)
}

func (d *dependencyLive) event(ev cbdash.Event) {
	switch {
	case ev.Kind == cbdash.EventDependency && ev.Dependency != nil && ev.Dependency.DependencyKey == d.key:
		d.dep, d.head = *ev.Dependency, true
	case ev.Kind == cbdash.EventTransition && ev.Transition != nil &&
		ev.Transition.Service == d.key.Service && ev.Transition.Breaker == d.key.Breaker:
		d.trans = true
	case ev.Kind == cbdash.EventCommand && ev.Command != nil &&
		ev.Command.Service == d.key.Service && ev.Command.Breaker == d.key.Breaker:
		d.cmds = true
	}
}

func (d *dependencyLive) flush(ctx context.Context) ([]byte, error) {
	var buf bytes.Buffer
	now := d.s.now()
	if d.head {
		if d.dep.Instances > len(d.dep.PerInstance) {
			// Members another collector serves: live views hold only
			// this one's lines; Collector.Dependency adds the store's.
			if full, err := d.s.col.Dependency(d.key); err == nil {
				d.dep = full
			}
		}
		causes := d.s.trips(ctx, []cbdash.Dependency{d.dep})[d.key]
		var part bytes.Buffer
		if err := templates.DepHeaderView(depHeader(d.dep, causes, now)).Render(ctx, &part); err != nil {
			return nil, err
		}
		if h := hash(part.Bytes()); h != d.lastHead {
			d.lastHead = h
			buf.Write(part.Bytes())
		}
		part.Reset()
		if err := templates.InstancesTable(instanceTable(d.dep, causes, now, d.paging, d.query)).Render(ctx, &part); err != nil {
			return nil, err
		}
		if h := hash(part.Bytes()); h != d.lastInsts {
			d.lastInsts = h
			buf.Write(part.Bytes())
		}
		if d.canOp {
			part.Reset()
			if err := templates.OperatorInstances(operatorForm("", d.dep).Instances).Render(ctx, &part); err != nil {
				return nil, err
			}
			if h := hash(part.Bytes()); h != d.lastOpInsts {
				d.lastOpInsts = h
				buf.Write(part.Bytes())
			}
		}
	}
	sp := d.span.at(now)
	if sp.endsNow() { // a range ending now moves with the clock
		if d.head && now.Sub(d.chartsAt) >= chartsEvery {
			d.chartsAt = now
			pts, err := d.s.history.History(ctx, cbdash.HistoryQuery{DependencyKey: d.key, From: sp.from, To: sp.to})
			if err != nil {
				return nil, err
			}
			gaps, err := d.s.gaps(ctx, cbdash.HistoryQuery{DependencyKey: d.key, From: sp.from, To: sp.to})
			if err != nil {
				return nil, err
			}
			if err := templates.Charts(dependencyChartsWithGaps(pts, gaps, sp.from, sp.to, d.dep)).Render(ctx, &buf); err != nil {
				return nil, err
			}
		}
	}
	if d.trans {
		rows, err := d.s.transitionRows(ctx, d.key, sp)
		if err != nil {
			return nil, err
		}
		if err := templates.TransitionLog(rows).Render(ctx, &buf); err != nil {
			return nil, err
		}
	}
	if d.cmds {
		cmds, err := d.s.depCommands(ctx, d.key)
		if err != nil {
			return nil, err
		}
		if err := templates.DepCommands(cmds).Render(ctx, &buf); err != nil {
			return nil, err
		}
	}
	d.head, d.trans, d.cmds = false, false, false
	return buf.Bytes(), nil
}

// auditLive re-renders the audit table when a command changes.
type auditLive struct {
	s       *Server
	service string
	dirty   bool
}

func (a *auditLive) reset(ctx context.Context, _ []*cbdash.Dependency) ([]byte, error) {
	a.dirty = true
	return a.flush(ctx)
}

func (a *auditLive) event(ev cbdash.Event) {
	if ev.Kind == cbdash.EventCommand && ev.Command != nil && (a.service == "" || ev.Command.Service == a.service) {
		a.dirty = true
	}
}

func (a *auditLive) flush(ctx context.Context) ([]byte, error) {
	if !a.dirty {
		return nil, nil
	}
	a.dirty = false
	cmds, err := a.s.history.Commands(ctx, cbdash.CommandQuery{Service: a.service})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := templates.AuditTable(commandViews(cmds, a.s.now())).Render(ctx, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// incidentRefresh is how often an open incident's page and the incident
// list are redrawn without an event: durations grow, and the detector
// opens and ends incidents a little after the transitions that cause
// them.
const incidentRefresh = 2 * time.Second

// incidentLive keeps an incident's page current while it is open: its
// status, summary, lanes, charts and timeline, redrawn on the transitions
// and commands of its dependency and every incidentRefresh.
type incidentLive struct {
	s     *Server
	is    IncidentStore
	id    int64
	key   cbdash.DependencyKey
	page  templates.Page
	dirty bool
	open  bool      // as last drawn
	at    time.Time // when last drawn
	last  uint64    // hash of the last message
}

func (l *incidentLive) reset(ctx context.Context, _ []*cbdash.Dependency) ([]byte, error) {
	l.dirty, l.open, l.last = true, true, 0
	return l.flush(ctx)
}

func (l *incidentLive) event(ev cbdash.Event) {
	switch {
	case ev.Kind == cbdash.EventTransition && ev.Transition != nil &&
		ev.Transition.Service == l.key.Service && ev.Transition.Breaker == l.key.Breaker:
		l.dirty = true
	case ev.Kind == cbdash.EventCommand && ev.Command != nil &&
		ev.Command.Service == l.key.Service && ev.Command.Breaker == l.key.Breaker:
		l.dirty = true
	}
}

func (l *incidentLive) flush(ctx context.Context) ([]byte, error) {
	now := l.s.now()
	if !l.dirty && !(l.open && now.Sub(l.at) >= incidentRefresh) {
		return nil, nil
	}
	l.dirty, l.at = false, now
	v, open, err := l.s.incidentModel(ctx, l.is, l.id, l.page)
	if err != nil {
		return nil, err
	}
	l.open = open
	var buf bytes.Buffer
	comps := []templ.Component{templates.IncidentStateBadge(v.State), templates.IncidentSummaryView(v.Summary),
		templates.IncidentLanesView(v.Lanes), templates.IncidentTimelineView(v.Timeline)}
	for _, c := range v.Charts {
		comps = append(comps, templates.ChartView(c))
	}
	if err := renderTo(ctx, &buf, comps...); err != nil {
		return nil, err
	}
	if h := hash(buf.Bytes()); h != l.last {
		l.last = h
		return buf.Bytes(), nil
	}
	return nil, nil
}

// incidentsLive keeps the incident list current: redrawn after
// transitions and every incidentRefresh, sent when it changed.
type incidentsLive struct {
	s        *Server
	is       IncidentStore
	q        cbdash.IncidentQuery
	fragment string
	dirty    bool
	at       time.Time
	last     uint64
}

func (l *incidentsLive) reset(ctx context.Context, _ []*cbdash.Dependency) ([]byte, error) {
	l.dirty, l.last = true, 0
	return l.flush(ctx)
}

func (l *incidentsLive) event(ev cbdash.Event) {
	if ev.Kind == cbdash.EventTransition {
		l.dirty = true
	}
}

func (l *incidentsLive) flush(ctx context.Context) ([]byte, error) {
	now := l.s.now()
	if !(l.dirty && now.Sub(l.at) >= l.s.cfg.LiveInterval) && now.Sub(l.at) < incidentRefresh {
		return nil, nil
	}
	l.dirty, l.at = false, now
	rows, err := l.s.incidentRows(ctx, l.is, l.q)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := templates.IncidentList(rows, l.fragment).Render(ctx, &buf); err != nil {
		return nil, err
	}
	if h := hash(buf.Bytes()); h != l.last {
		l.last = h
		return buf.Bytes(), nil
	}
	return nil, nil
}
