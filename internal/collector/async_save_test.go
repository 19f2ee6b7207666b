package collector

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/cbdash/cbdash/internal/ingest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/disktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/coder/websocket"
)

// Tests of the session's hand-over of batches to the store's writer
// (store.Stream) under failures, replacement and shutdown: every
// batch acknowledged is stored, none twice, none acknowledged unstored,
// answers in read order.

// rawStoreDB opens the harness's database directly, as another process.
func rawStoreDB(t *testing.T, h *harness) *sql.DB {
	t.Helper()
	driver, dsn := "sqlite", h.path+"?_pragma=busy_timeout(5000)"
	if store.IsPostgres(h.path) {
		driver, dsn = "pgx", h.path
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// storedCalls is the sum of the admitted calls the store holds for
// api/db, and the agent process a1/1's last stored seq.
func storedCalls(t *testing.T, h *harness) (admitted int64, last uint64) {
	t.Helper()
	ctx := context.Background()
	pts, err := h.store.History(ctx, cbdash.HistoryQuery{
		DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From:          h.now().Add(-time.Hour), To: h.now().Add(time.Hour), Resolution: cbdash.ResolutionSecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pts {
		admitted += p.Counts.Admitted
	}
	last, err = h.store.LastSeq(ctx, "api", "a1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return admitted, last
}

// queueDepth is the collector's gauge of batches handed to the store and
// not completed.
// expectResendStoredOnce checks the answers to an agent's resend of its
// batches up to seq n (10 calls each, as the tests here send them): one
// ack of n, and the store holds each of the n batches once.
func expectResendStoredOnce(t *testing.T, h *harness, a *rawAgent, n uint64) {
	t.Helper()
	if got := a.answers(untilAck(n)); fmt.Sprint(got) != fmt.Sprintf("[ack %d]", n) {
		t.Fatalf("answers to the resend %v, want [ack %d]", got, n)
	}
	if admitted, last := storedCalls(t, h); admitted != 10*int64(n) || last != n {
		t.Fatalf("the store holds %d calls, last seq %d; want each of the %d batches once", admitted, last, n)
	}
}

func queueDepth(h *harness) float64 { return h.col.ing.QueueDepth() }

// sendAll writes each batch, ignoring write errors: the session may end
// (and close the socket) while the agent is still sending.
func (a *rawAgent) sendAll(bs ...protocol.Batch) {
	for _, b := range bs {
		data, err := json.Marshal(b)
		if err != nil {
			a.t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = a.conn.Write(ctx, websocket.MessageText, data)
		cancel()
		if err != nil {
			return
		}
	}
}

// answers reads acks and errors until stop says so of the last one, or
// the connection ends; it returns them as "ack N", "error N" or "fatal"
// (retry: "fatal retry"), consecutive acks written as their last, and
// fails when acks go down or a message is neither.
func (a *rawAgent) answers(stop func(kind string, seq uint64) bool) []string {
	a.t.Helper()
	var out []string
	var lastAck uint64
	for {
		typ, data, err := a.next()
		if err != nil {
			return out
		}
		var kind string
		var seq uint64
		switch typ {
		case protocol.TypeAck:
			var ack protocol.Ack
			if err := json.Unmarshal(data, &ack); err != nil {
				a.t.Fatal(err)
			}
			if ack.Seq < lastAck {
				a.t.Fatalf("ack %d after ack %d (answers so far %v)", ack.Seq, lastAck, out)
			}
			lastAck, kind, seq = ack.Seq, "ack", ack.Seq
			if n := len(out); n > 0 && strings.HasPrefix(out[n-1], "ack ") {
				out = out[:n-1]
			}
			out = append(out, fmt.Sprintf("ack %d", seq))
		case protocol.TypeError:
			var e protocol.Error
			if err := json.Unmarshal(data, &e); err != nil {
				a.t.Fatal(err)
			}
			switch {
			case e.Fatal && e.Retry:
				kind = "fatal retry"
			case e.Fatal:
				kind = "fatal"
			default:
				kind = "error"
				seq = e.Seq
			}
			if kind == "error" {
				out = append(out, fmt.Sprintf("error %d", seq))
			} else {
				out = append(out, kind)
			}
		default:
			a.t.Fatalf("got %s %s among the answers, want acks and errors", typ, data)
		}
		if stop(kind, seq) {
			return out
		}
	}
}

func untilFatal(kind string, _ uint64) bool { return strings.HasPrefix(kind, "fatal") }

// expectClose reads the close that follows a fatal error (answering it,
// as an agent does, so the collector's close handshake ends at once) and
// fails unless its status is code.
func (a *rawAgent) expectClose(code websocket.StatusCode) {
	a.t.Helper()
	if typ, data, err := a.next(); websocket.CloseStatus(err) != code {
		a.t.Fatalf("after the fatal error: %s %s %v, want close %d", typ, data, err, code)
	}
}

func untilAck(n uint64) func(string, uint64) bool {
	return func(kind string, seq uint64) bool { return kind == "ack" && seq >= n }
}

// TestABatchFailingInTheMiddleOfAStreamIsNotPassedByTheOnesBehindIt: an
// agent sends 14 batches without waiting; batch 6 (the one with a
// transition: the transitions table's cause column is renamed) fails to
// be stored while the ones behind it are already queued. The agent gets
// acks up to 5, then a fatal retry-later, never an ack of 6 or later;
// the store holds batches 1-5 only (a later one stored would make 6 look
// stored). With the column back, a new connection's welcome says 5, the
// resent 6-14 are acknowledged up to 14, and the store holds each of
// the 14 batches once. The queue gauge is back at 0.
func TestABatchFailingInTheMiddleOfAStreamIsNotPassedByTheOnesBehindIt(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	db := rawStoreDB(t, h)
	if _, err := db.Exec(`ALTER TABLE transitions RENAME COLUMN cause TO cause_renamed`); err != nil {
		t.Fatal(err)
	}
	const n, bad = 14, 6
	batch := func(seq uint64) protocol.Batch {
		if seq == bad {
			return h.batch(seq, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, 1))
		}
		return h.batch(seq, 10, 0)
	}
	var all []protocol.Batch
	for seq := uint64(1); seq <= n; seq++ {
		all = append(all, batch(seq))
	}
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.sendAll(all...)
	got := a.answers(untilFatal)
	if want := []string{"ack 5", "fatal retry"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	a.expectClose(websocket.StatusInternalError)
	if admitted, last := storedCalls(t, h); admitted != 50 || last != 5 {
		t.Fatalf("the store holds %d calls, last seq %d; want batches 1-5 (50 calls, last seq 5)", admitted, last)
	}
	eventually.True(t, "queue gauge back at 0", func() bool { return queueDepth(h) == 0 })

	if _, err := db.Exec(`ALTER TABLE transitions RENAME COLUMN cause_renamed TO cause`); err != nil {
		t.Fatal(err)
	}
	b := dialRaw(t, h, h.token)
	if w := b.hello("a1", 1); w.LastSeq != 5 {
		t.Fatalf("welcome last_seq %d, want 5", w.LastSeq)
	}
	b.sendAll(all[bad-1:]...)
	expectResendStoredOnce(t, h, b, n)
	eventually.True(t, "queue gauge back at 0", func() bool { return queueDepth(h) == 0 })
}

// TestRefusalsForGoodDuplicatesAndRefusedBatchesAreAnsweredInReadOrder:
// batch 4 can never be stored (a trigger refuses its transition) while
// the store takes the others. The first two connections get acks up to 3
// and a fatal retry-later; on the third (once the store's probe has
// succeeded since the second failure), batch 4 is refused for good and the agent
// sends, without waiting, 4, a duplicate of 2, 5, a batch 6 the
// collector refuses (sent_at negative), 7, a duplicate of 5 and 8. The
// answers come in that order: the refusal of 4, acks up to 5, the
// refusal of 6, acks up to 8; the store holds batches 1-3, 5, 7 and 8
// once each.
func TestRefusalsForGoodDuplicatesAndRefusedBatchesAreAnsweredInReadOrder(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	poison(t, h, rawStoreDB(t, h))
	batch := func(seq uint64) protocol.Batch {
		switch seq {
		case 4:
			return h.batch(seq, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, poisonGeneration))
		case 6:
			b := h.batch(seq, 10, 0)
			b.SentAt = -1
			return b
		}
		return h.batch(seq, 10, 0)
	}
	for attempt := 1; attempt < ingest.MaxStoreAttempts; attempt++ {
		a := dialRaw(t, h, h.token)
		w := a.hello("a1", 1)
		var want []string
		if attempt == 1 {
			a.sendAll(batch(1), batch(2), batch(3), batch(4), batch(5))
			want = []string{"ack 3", "fatal retry"}
		} else {
			if w.LastSeq != 3 {
				t.Fatalf("attempt %d: welcome last_seq %d, want 3", attempt, w.LastSeq)
			}
			a.sendAll(batch(4), batch(5))
			want = []string{"fatal retry"}
		}
		if got := a.answers(untilFatal); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("attempt %d: answers %v, want %v", attempt, got, want)
		}
		a.expectClose(websocket.StatusInternalError)
	}
	eventually.True(t, "the store probed since the last failure", h.col.ing.ProbedSinceFailures)
	a := dialRaw(t, h, h.token)
	if w := a.hello("a1", 1); w.LastSeq != 3 {
		t.Fatalf("welcome last_seq %d, want 3", w.LastSeq)
	}
	a.sendAll(batch(4), batch(2), batch(5), batch(6), batch(7), batch(5), batch(8))
	if got, want := a.answers(untilAck(8)), []string{"error 4", "ack 5", "error 6", "ack 8"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	if admitted, last := storedCalls(t, h); admitted != 60 || last != 8 {
		t.Fatalf("the store holds %d calls, last seq %d; want batches 1-3, 5, 7, 8 (60 calls), last seq 8", admitted, last)
	}
	eventually.True(t, "queue gauge back at 0", func() bool { return queueDepth(h) == 0 })
}

// storeLock holds the store's tables from another connection, so that
// the collector's writer waits (SQLite: the write lock, for less than its
// 5 s busy timeout; PostgreSQL: instance_runs, which a batch reads and
// writes, locked exclusively). release lets it go on.
func storeLock(t *testing.T, h *harness) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := rawStoreDB(t, h).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{"BEGIN IMMEDIATE"}
	if store.IsPostgres(h.path) {
		stmts = []string{"BEGIN", "LOCK TABLE instance_runs IN ACCESS EXCLUSIVE MODE"}
	}
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			t.Error(err)
		}
		conn.Close()
	}
	t.Cleanup(release)
	return release
}

// TestANewConnectionWaitsForTheEightBatchesItsPredecessorQueued: the
// store is held while an agent's connection has 8 batches (ingest.SaveQueue)
// handed to it; a new connection of the same instance replaces it. The
// old one is told so without an ack (nothing is committed yet); once the
// store goes on, the new connection's welcome says 8 (its predecessor's
// batches are final before last_seq is read), the resent batches are
// acknowledged as duplicates, and the store holds each once.
func TestANewConnectionWaitsForTheEightBatchesItsPredecessorQueued(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	var all []protocol.Batch
	for seq := uint64(1); seq <= ingest.SaveQueue; seq++ {
		all = append(all, h.batch(seq, 10, 0))
	}
	release := storeLock(t, h)
	a.sendAll(all...)
	eventually.True(t, "8 batches handed to the store", func() bool { return queueDepth(h) == ingest.SaveQueue })
	b := dialRaw(t, h, h.token)
	b.send(rawHello("a1", 1))
	var e protocol.Error
	a.expect(protocol.TypeError, &e)
	if !e.Fatal || !strings.Contains(e.Reason, "replaced by a newer connection") {
		t.Fatalf("the replaced connection got %+v", e)
	}
	a.expectClose(websocket.StatusGoingAway)
	release()
	var w protocol.Welcome
	b.expect(protocol.TypeWelcome, &w)
	if w.LastSeq != ingest.SaveQueue {
		t.Fatalf("welcome last_seq %d, want %d: the replaced connection's batches were not final", w.LastSeq, ingest.SaveQueue)
	}
	b.sendAll(all...)
	expectResendStoredOnce(t, h, b, ingest.SaveQueue)
	eventually.True(t, "queue gauge back at 0", func() bool { return queueDepth(h) == 0 })
}

// TestShutdownWithQueuedBatchesStoresThemOnce: the collector stops (and
// its store closes) while a connection has 8 batches handed to the held
// store. The agent is told the collector is stopping, with no ack; once
// the store goes on, the stop completes with every queued batch
// committed (the gauge at 0). A collector started again on the database
// welcomes the agent with last_seq 8, acknowledges the resend as
// duplicates, and the store holds each batch once.
func TestShutdownWithQueuedBatchesStoresThemOnce(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	var all []protocol.Batch
	for seq := uint64(1); seq <= ingest.SaveQueue; seq++ {
		all = append(all, h.batch(seq, 10, 0))
	}
	release := storeLock(t, h)
	a.sendAll(all...)
	eventually.True(t, "8 batches handed to the store", func() bool { return queueDepth(h) == ingest.SaveQueue })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		h.stop()
	}()
	var e protocol.Error
	a.expect(protocol.TypeError, &e)
	if !e.Fatal || !e.Retry || e.Reason != "collector stopping" {
		t.Fatalf("the agent got %+v, want the collector stopping", e)
	}
	a.expectClose(websocket.StatusGoingAway)
	release()
	<-stopped
	if d := queueDepth(h); d != 0 {
		t.Fatalf("queue gauge %v after the stop, want 0", d)
	}
	h2 := startHarness(t, h.path, h.restartOpts)
	b := dialRaw(t, h2, h2.token)
	if w := b.hello("a1", 1); w.LastSeq != ingest.SaveQueue {
		t.Fatalf("welcome last_seq %d after the restart, want %d", w.LastSeq, ingest.SaveQueue)
	}
	b.sendAll(all...)
	expectResendStoredOnce(t, h2, b, ingest.SaveQueue)
}

// TestAFailedBatchWithBatchesBehindItIsAlwaysAnsweredWithAFatalRetry: the
// failure of a batch with others queued behind it ends the session only
// after its answers are written: the acks of the batches before it, then
// the fatal retry-later and close 1011, never a connection cut short
// (the reading goroutine, finding the session failed as it hands the
// next batch, must not cancel the writer before it has answered). Many
// rounds, each a new agent process, since the end of the reading and
// the writer's answers race.
func TestAFailedBatchWithBatchesBehindItIsAlwaysAnsweredWithAFatalRetry(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	if _, err := rawStoreDB(t, h).Exec(`ALTER TABLE transitions RENAME COLUMN cause TO cause_renamed`); err != nil {
		t.Fatal(err)
	}
	for round := range 40 {
		a := dialRaw(t, h, h.token)
		a.hello("a1", int64(round+1))
		var all []protocol.Batch
		for seq := uint64(1); seq <= 14; seq++ {
			if seq == 6 {
				all = append(all, h.batch(seq, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, 1)))
			} else {
				all = append(all, h.batch(seq, 10, 0))
			}
		}
		a.sendAll(all...)
		if got, want := a.answers(untilFatal), "[ack 5 fatal retry]"; fmt.Sprint(got) != want {
			t.Fatalf("round %d: answers %v, want %s", round, got, want)
		}
		a.expectClose(websocket.StatusInternalError)
	}
}

// TestAnAgentThatDoesNotWaitForTheWelcomeGetsItFirst: an agent process
// whose batches 1-3 are stored reconnects and sends, without reading,
// its hello, duplicates of 2 and 3, batch 4, a message that is not JSON,
// batch 5, a binary frame and batch 6. The welcome comes first, saying
// 3; then, in read order, acks up to 4, the refusal of the garbage, the
// ack of 5, the refusal of the binary frame, the ack of 6. The store
// holds batches 1-6 once each.
func TestAnAgentThatDoesNotWaitForTheWelcomeGetsItFirst(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.sendAll(h.batch(1, 10, 0), h.batch(2, 10, 0), h.batch(3, 10, 0))
	if got := a.answers(untilAck(3)); fmt.Sprint(got) != "[ack 3]" {
		t.Fatalf("answers %v", got)
	}
	a.conn.Close(websocket.StatusNormalClosure, "")

	b := dialRaw(t, h, h.token)
	b.send(rawHello("a1", 1))
	b.sendAll(h.batch(2, 10, 0), h.batch(3, 10, 0), h.batch(4, 10, 0))
	b.sendRaw([]byte(`{"type":"batch","seq":`))
	b.sendAll(h.batch(5, 10, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.conn.Write(ctx, websocket.MessageBinary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	b.sendAll(h.batch(6, 10, 0))
	var w protocol.Welcome
	b.expect(protocol.TypeWelcome, &w)
	if w.LastSeq != 3 {
		t.Fatalf("welcome last_seq %d, want 3", w.LastSeq)
	}
	if got, want := b.answers(untilAck(6)), "[ack 4 error 0 ack 5 error 0 ack 6]"; fmt.Sprint(got) != want {
		t.Fatalf("answers %v, want %s", got, want)
	}
	if admitted, last := storedCalls(t, h); admitted != 60 || last != 6 {
		t.Fatalf("the store holds %d calls, last seq %d; want batches 1-6 once (60 calls)", admitted, last)
	}
	eventually.True(t, "queue gauge back at 0", func() bool { return queueDepth(h) == 0 })
}

// TestAFullDiskAmidAStreamAcksOnlyWhatWasCommitted: batches 1-5 are
// stored; then the disk fills, and the agent sends a batch too large for
// what is left (6) and 7-14 behind it without waiting. None of 6-14 is
// acknowledged: the agent gets a fatal retry-later and close 1011. Once
// space is freed, a new connection's welcome says 5, the resent 6-14 are
// acknowledged up to 14, and the store holds each of the 14 batches once.
func TestAFullDiskAmidAStreamAcksOnlyWhatWasCommitted(t *testing.T) {
	dir := disktest.Tmpfs(t, 2<<20)
	h := startHarness(t, filepath.Join(dir, "cbdash.db"), nil)
	var all []protocol.Batch
	for seq := uint64(1); seq <= 14; seq++ {
		b := h.batch(seq, 10, 0)
		if seq == 6 {
			for i := range 1500 {
				tr := h.trans(protocol.StateClosed, protocol.StateOpen, uint64(i+1))
				tr.Cause.Reason = strings.Repeat("x", 300)
				b.Transitions = append(b.Transitions, tr)
			}
			b.Windows[0].State = protocol.StateOpen
		}
		all = append(all, b)
	}
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.sendAll(all[:5]...)
	if got := a.answers(untilAck(5)); fmt.Sprint(got) != "[ack 5]" {
		t.Fatalf("answers %v", got)
	}
	free := disktest.Fill(t, dir)
	a.sendAll(all[5:]...)
	if got := a.answers(untilFatal); fmt.Sprint(got) != "[fatal retry]" {
		t.Fatalf("answers on a full disk %v, want only a fatal retry-later", got)
	}
	a.expectClose(websocket.StatusInternalError)
	free()
	if admitted, last := storedCalls(t, h); admitted != 50 || last != 5 {
		t.Fatalf("the store holds %d calls, last seq %d; want batches 1-5", admitted, last)
	}
	b := dialRaw(t, h, h.token)
	if w := b.hello("a1", 1); w.LastSeq != 5 {
		t.Fatalf("welcome last_seq %d, want 5", w.LastSeq)
	}
	b.sendAll(all[5:]...)
	expectResendStoredOnce(t, h, b, 14)
	eventually.True(t, "queue gauge back at 0", func() bool { return queueDepth(h) == 0 })
}

// TestAStoreClosedUnderAnOpenSessionAcksNothingMore: batches 1-3 are
// stored; then the store is closed while the collector runs, and the
// agent sends 4-6. It gets no ack of them, but a fatal retry-later and
// close 1011; the store holds batches 1-3, and the queue gauge is back
// at 0.
func TestAStoreClosedUnderAnOpenSessionAcksNothingMore(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	a.sendAll(h.batch(1, 10, 0), h.batch(2, 10, 0), h.batch(3, 10, 0))
	if got := a.answers(untilAck(3)); fmt.Sprint(got) != "[ack 3]" {
		t.Fatalf("answers %v", got)
	}
	if err := h.store.Close(); err != nil {
		t.Fatal(err)
	}
	a.sendAll(h.batch(4, 10, 0), h.batch(5, 10, 0), h.batch(6, 10, 0))
	if got := a.answers(untilFatal); fmt.Sprint(got) != "[fatal retry]" {
		t.Fatalf("answers with the store closed %v, want a fatal retry-later", got)
	}
	a.expectClose(websocket.StatusInternalError)
	eventually.True(t, "queue gauge back at 0", func() bool { return queueDepth(h) == 0 })
	s := storetestReopen(t, h)
	if last, err := s.LastSeq(context.Background(), "api", "a1", 1); err != nil || last != 3 {
		t.Fatalf("LastSeq %d, %v; want 3", last, err)
	}
}

// storetestReopen opens the harness's database again (its store closed).
func storetestReopen(t *testing.T, h *harness) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), h.path, store.Options{Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestANewConnectionsWelcomeIsTheStoredPrefixWhenAQueuedBatchFails: as
// above, 8 batches are handed to the held store when a new connection
// replaces the agent's; batch 4 of them cannot be stored (its
// transition; the cause column is renamed). Once the store goes on, the
// new connection's welcome says 3: batches 5-8 were skipped, not stored
// past the failed one, and the resend of 4-8 (the column back) stores
// each once.
func TestANewConnectionsWelcomeIsTheStoredPrefixWhenAQueuedBatchFails(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	db := rawStoreDB(t, h)
	if _, err := db.Exec(`ALTER TABLE transitions RENAME COLUMN cause TO cause_renamed`); err != nil {
		t.Fatal(err)
	}
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	var all []protocol.Batch
	for seq := uint64(1); seq <= ingest.SaveQueue; seq++ {
		if seq == 4 {
			all = append(all, h.batch(seq, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, 1)))
		} else {
			all = append(all, h.batch(seq, 10, 0))
		}
	}
	release := storeLock(t, h)
	a.sendAll(all...)
	eventually.True(t, "8 batches handed to the store", func() bool { return queueDepth(h) == ingest.SaveQueue })
	b := dialRaw(t, h, h.token)
	b.send(rawHello("a1", 1))
	var e protocol.Error
	a.expect(protocol.TypeError, &e)
	if !e.Fatal || !strings.Contains(e.Reason, "replaced by a newer connection") {
		t.Fatalf("the replaced connection got %+v", e)
	}
	a.expectClose(websocket.StatusGoingAway)
	release()
	var w protocol.Welcome
	b.expect(protocol.TypeWelcome, &w)
	if w.LastSeq != 3 {
		t.Fatalf("welcome last_seq %d, want 3 (batch 4 failed, 5-8 skipped)", w.LastSeq)
	}
	if admitted, last := storedCalls(t, h); admitted != 30 || last != 3 {
		t.Fatalf("the store holds %d calls, last seq %d; want batches 1-3", admitted, last)
	}
	if _, err := db.Exec(`ALTER TABLE transitions RENAME COLUMN cause_renamed TO cause`); err != nil {
		t.Fatal(err)
	}
	b.sendAll(all[3:]...)
	expectResendStoredOnce(t, h, b, ingest.SaveQueue)
	eventually.True(t, "queue gauge back at 0", func() bool { return queueDepth(h) == 0 })
}
