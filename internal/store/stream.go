package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Stream is the sequence of batches of one agent process (an agent's
// connection), saved without waiting for their commit: Save queues a
// batch for the writer, and the writer sends each batch's outcome to the
// stream, where its owner receives it with Next on a goroutine of its
// own. The writer never runs the owner's code and never waits for it.
//
// Outcomes. A batch that is not written (it failed and was rolled back to
// its savepoint) has its outcome sent at once, before its group commits;
// the others after their group's COMMIT or its failure. A batch's
// outcome is sent exactly once, including when the store closes (the
// batches queued before Close are committed by the writer's last drain).
//
// Failures hold the stream. Once a batch of the stream has failed
// (BatchOutcome.Err other than ErrSkipped), the writer writes none of the
// stream's later batches (they wait, in order) until its owner has
// answered every such failure with Resume (write them: the failed batch
// is refused for good and the rest go on) or Stop (write none of the
// stream's batches any more: they end with ErrSkipped). A later batch
// stored past a failed one would make the failed one look stored (the
// store keeps the highest seq of a process). Batches still held when the
// store closes end with ErrSkipped.
//
// Flow control: at most the size given to NewStream of the stream's
// batches are queued, being written, or done with their outcome not
// received; Save waits for room.
type Stream struct {
	w    *writer
	name instName // the agent process
	out  chan BatchOutcome
	room chan struct{} // a token for each batch saved whose outcome is not received

	// Owned by the writer goroutine.
	unanswered int   // failures sent and not answered by Resume or Stop yet
	stopped    bool  // Stop: none of its batches is written any more
	parked     []*op // batches waiting for the answers, in order
}

// BatchOutcome is the outcome of one batch of a Stream: Batch is the
// pointer given to Save; Stored and Err are SaveBatch's results (Stored
// false with a nil Err: a duplicate, stored before). Err is ErrSkipped
// for a batch not tried (the stream was stopped, or the store closed
// while it was held), or the write's error.
type BatchOutcome struct {
	Batch  *protocol.Batch
	Stored bool
	Err    error
}

// NewStream returns a Stream for the batches of the agent process
// (service, instance, startedAt), with room for size batches whose
// outcome is not received (size < 1 is 1). Errors: cbdash.ErrInvalid
// when service or instance is empty.
func (s *Store) NewStream(service, instance string, startedAt int64, size int) (*Stream, error) {
	if err := checkNames("service", service, "instance", instance); err != nil {
		return nil, err
	}
	size = max(size, 1)
	return &Stream{w: s.w, name: instName{service, instance, startedAt},
		out: make(chan BatchOutcome, size), room: make(chan struct{}, size)}, nil
}

// Save queues b, received at at, to be stored as SaveBatch stores it,
// waiting for room in the stream and in the writer's queue until ctx is
// done, and returns; the outcome comes with Next. full says the caller
// hands the stream nothing more until one of its batches' outcome has
// come: a transaction whose batches all come from full streams is
// committed without waiting for company (groupWait), as their writers
// can send nothing before it commits (one agent resending a backlog is
// not paced by the wait meant for a thousand). b must not change until
// its outcome has come. When Save returns an error (as SaveBatch's
// before queueing: cbdash.ErrInvalid for a zero Seq, ErrClosed, ctx's),
// no outcome comes for b.
func (st *Stream) Save(ctx context.Context, b *protocol.Batch, at time.Time, full bool) error {
	if b.Seq == 0 || b.Seq > math.MaxInt64 {
		return fmt.Errorf("%w: seq %d is out of range", cbdash.ErrInvalid, b.Seq)
	}
	causes, err := transitionCauses(b)
	if err != nil {
		return err
	}
	select {
	case st.room <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	now := ms(at)
	o := &op{stream: st, batch: b, full: full, shared: true, inst: &st.name}
	o.run = func(x *wtx) error {
		var err error
		o.stored, err = x.saveBatch(st.name.service, st.name.instance, st.name.startedAt, b, causes, now)
		return err
	}
	if err := st.w.enqueue(ctx, o); err != nil {
		<-st.room
		return err
	}
	return nil
}

// Next waits for the outcome of one of the stream's batches, in the order
// the writer decided them (not necessarily the order of Save: a failure
// comes at once, before the commit of the batches written before it).
// Call it once for every Save that returned nil; each call frees room for
// one more batch.
func (st *Stream) Next() BatchOutcome {
	o := <-st.out
	<-st.room
	return o
}

// Resume answers one failure of the stream: the batches held behind it
// are written (once every failure is answered), in order. See Stream.
func (st *Stream) Resume() { st.answer(false) }

// Stop answers one failure of the stream: none of its batches is written
// any more (the held ones and the ones saved later end with ErrSkipped).
// See Stream.
func (st *Stream) Stop() { st.answer(true) }

// answer queues the owner's answer to a failure for the writer, which
// applies it at its place in the queue (after the batches saved before
// it). It waits for room in the queue, not for the writer: the writer
// never waits for the stream's owner. After Close it does nothing (the
// writer's last drain ends the held batches).
func (st *Stream) answer(stop bool) {
	_ = st.w.enqueue(context.Background(), &op{answers: st, stop: stop})
}

// tell sends a stream's op its outcome, once; a failure holds the
// stream's later batches until it is answered. It never blocks: the
// stream's room bounds its outcomes not received. Writer goroutine only.
func (w *writer) tell(o *op) {
	st := o.stream
	if st == nil || o.told {
		return
	}
	o.told = true
	if o.err != nil && !errors.Is(o.err, ErrSkipped) {
		st.unanswered++
	}
	st.out <- BatchOutcome{Batch: o.batch, Stored: o.stored && o.err == nil, Err: o.err}
}

// admit decides which ops of a group run, in queue order: an answer to
// a stream's failure (Resume, Stop) takes effect at its place, putting
// the stream's held batches back in line there or ending them with
// ErrSkipped; a batch of a held stream is parked until the answers
// come; a batch of a stopped stream ends with ErrSkipped. Answers are not
// ops of the group. Writer goroutine only.
func (w *writer) admit(group []*op) []*op {
	plain := true
	for _, o := range group {
		if o.answers != nil || o.stream != nil && (o.stream.stopped || o.stream.unanswered > 0) {
			plain = false
			break
		}
	}
	if plain {
		return group
	}
	out := make([]*op, 0, len(group))
	for _, o := range group {
		switch st := o.stream; {
		case o.answers != nil:
			out = w.applyAnswer(out, o)
		case st == nil:
			out = append(out, o)
		case st.stopped:
			o.err = ErrSkipped
			out = append(out, o)
		case st.unanswered > 0:
			w.park(o)
		default:
			out = append(out, o)
		}
	}
	return out
}

// park holds o, a batch of a stream with unanswered failures, until they
// are answered.
func (w *writer) park(o *op) {
	st := o.stream
	st.parked = append(st.parked, o)
	w.held[st] = struct{}{}
}

// applyAnswer applies answer a (Resume or Stop) to its stream and
// appends to out what it releases: the held batches, to be written once
// no failure of the stream is unanswered, or ended with ErrSkipped once
// it is stopped.
func (w *writer) applyAnswer(out []*op, a *op) []*op {
	st := a.answers
	st.unanswered = max(st.unanswered-1, 0)
	st.stopped = st.stopped || a.stop
	if !st.stopped && st.unanswered > 0 {
		return out
	}
	for _, o := range st.parked {
		o.err = nil
		if st.stopped {
			o.err = ErrSkipped
		}
		out = append(out, o)
	}
	st.parked = nil
	delete(w.held, st)
	return out
}

// releaseHeld ends with ErrSkipped the batches still held when the writer
// stops (their answer can no longer be queued).
func (w *writer) releaseHeld() {
	var left []*op
	for st := range w.held {
		for _, o := range st.parked {
			o.err = ErrSkipped
			left = append(left, o)
		}
		st.parked = nil
	}
	clear(w.held)
	if len(left) > 0 {
		w.finish(left, true)
	}
}
