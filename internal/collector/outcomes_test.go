package collector

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// blockingLog is a slog handler whose Handle blocks on the record with
// message msg until release is called (entered is closed when it first
// does); other records are discarded.
type blockingLog struct {
	msg      string
	entered  chan struct{}
	released chan struct{}
	once     sync.Once
	relOnce  sync.Once
}

func (l *blockingLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *blockingLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *blockingLog) WithGroup(string) slog.Handler            { return l }
func (l *blockingLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		l.once.Do(func() { close(l.entered) })
		<-l.released
	}
	return nil
}
func (l *blockingLog) release() { l.relOnce.Do(func() { close(l.released) }) }

// What a session does with a batch's outcome (here: log a batch the
// store failed to save, which blocks) runs on the session's own
// goroutine, not on the store's writer: while agent a1's failed batch is
// being handled, agent a2's hello and batch are written and acknowledged.
// (When the writer called the session back on its goroutine, one slow
// session held every write of the store.)
func TestASessionHandlingAnOutcomeDoesNotHoldTheStoresWriter(t *testing.T) {
	log := &blockingLog{msg: "save batch", entered: make(chan struct{}), released: make(chan struct{})}
	h := startHarness(t, "", func(c *Config) { c.Logger = slog.New(log) })
	t.Cleanup(log.release) // before the harness stops
	poison(t, h, rawStoreDB(t, h))
	a1 := dialRaw(t, h, h.token)
	a1.hello("a1", 1)
	a1.send(h.batch(1, 10, 0, h.trans(protocol.StateClosed, protocol.StateOpen, poisonGeneration)))
	<-log.entered // a1's failed batch is being handled, and stays so
	a2 := dialRaw(t, h, h.token)
	a2.hello("a2", 1)
	a2.send(h.batch(1, 7, 0))
	var ack protocol.Ack
	a2.expect(protocol.TypeAck, &ack)
	if ack.Seq != 1 {
		t.Fatalf("a2: ack %d, want 1", ack.Seq)
	}
	log.release()
	if got := a1.answers(untilFatal); len(got) != 1 || got[0] != "fatal retry" {
		t.Fatalf("a1: answers %v, want a fatal retry-later", got)
	}
}
