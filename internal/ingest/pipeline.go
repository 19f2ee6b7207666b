package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// The ingest pipeline. Both transports, the agent websocket (session.go)
// and POST /api/v1/ingest (ingest.go), run the same steps, in this order,
// so that an agent is judged, stored and answered alike whichever it uses:
//
//  1. authorize: the agent token, and the service it is limited to;
//  2. admitHello: the hello's validation (protocol rules, the
//     transport's own) and the token's service;
//     admitLimits: the token's instances and breakers, the collector's
//     dependencies (limits.go);
//  3. register: record the hello, read the last stored seq, declare the
//     instance to live state (the transport says whether it has a
//     session to attach and a welcome to queue);
//  4. admitBatch: a batch's validation against the hello at the
//     collector's time (duplicates, at or below the last seq, are the
//     transport's to recognise: the websocket knows what it has queued);
//  5. correctClock: measure the agent's clock skew, and move the times of
//     an agent far ahead to the collector's clock;
//     vetCauses: a cause claiming a command the collector did not
//     send to the instance becomes agent-reported (trust.go);
//     toLive: apply it to live state;
//  6. save: commit it, then afterSave (metrics, command results);
//  7. pending: the commands waiting for the instance.
//
// Every refusal is a *refusal: permanent ones (bad token, another
// service, invalid input) wrap cbdash.ErrUnauthorized, ErrForbidden or
// ErrInvalid; errRetryLater marks the ones that say nothing about the
// agent's input (the collector could not do its part now).

// errRetryLater is wrapped by refusals that are the collector's trouble:
// the same message may succeed later.
var errRetryLater = errors.New("retry later")

// refusal is a step's answer when it does not go on: what the agent is
// told (Reason, which names the field where it can) and what kind of
// trouble it is (Kind: one of cbdash.ErrUnauthorized, ErrForbidden,
// ErrInvalid, or errRetryLater). Cause, when set, is the underlying error,
// for the log only.
type refusal struct {
	Kind   error
	Reason string
	Cause  error
	// From save: giveUp says the batch is refused for good (Kind is then
	// cbdash.ErrInvalid).
	giveUp bool
	// retryAfter, on a retry-later refusal for the store's trouble, is
	// when the agent may come back (protocol.Error.RetryAfterMillis, HTTP
	// Retry-After); 0 = its own backoff (5 s over HTTP).
	retryAfter time.Duration
}

func (r *refusal) Error() string { return r.Reason }

// Unwrap lets errors.Is see the kind (and the cause).
func (r *refusal) Unwrap() []error {
	if r.Cause != nil {
		return []error{r.Kind, r.Cause}
	}
	return []error{r.Kind}
}

// Permanent reports whether the same message will be refused again.
func (r *refusal) Permanent() bool { return !errors.Is(r.Kind, errRetryLater) }

func refuse(kind error, format string, args ...any) *refusal {
	return &refusal{Kind: kind, Reason: fmt.Sprintf(format, args...)}
}

// retryLater is a refusal of the collector's own trouble.
func retryLater(cause error, format string, args ...any) *refusal {
	return &refusal{Kind: errRetryLater, Reason: fmt.Sprintf(format, args...) + "; retry later", Cause: cause}
}

// storeTrouble is a retry-later refusal for the store's trouble: the
// agent may come back after StoreRetryAfter.
func storeTrouble(cause error, format string, args ...any) *refusal {
	rf := retryLater(cause, format, args...)
	rf.retryAfter = StoreRetryAfter
	return rf
}

// invalidInput wraps a validation error as a permanent refusal; prefix
// (for example "hello: ") says which part of the message it is about.
func invalidInput(prefix string, err error) *refusal {
	return &refusal{Kind: cbdash.ErrInvalid, Reason: truncate(prefix+err.Error(), 500)}
}

// transport says which transport feeds the pipeline; a few rules differ.
type transport int

const (
	overWebsocket transport = iota
	overHTTP
)

// authorize checks an agent token and returns the service it is limited
// to ("" = any).
func (c *Pipeline) authorize(ctx context.Context, token string) (string, *refusal) {
	svc, err := c.store.CheckAgentToken(ctx, token)
	switch {
	case err == nil:
		return svc, nil
	case errors.Is(err, cbdash.ErrUnauthorized):
		return "", refuse(cbdash.ErrUnauthorized, "bad or missing agent token (unauthorized)")
	default:
		c.log.Error("check agent token", "err", err)
		return "", storeTrouble(err, "collector error checking the token")
	}
}

// admitHello validates a hello and that the token (limited to
// tokenService, "" = any) may speak for its service.
func (c *Pipeline) admitHello(h *protocol.Hello, tokenService string, tr transport) *refusal {
	if err := h.ValidateAt(c.now().UnixMilli()); err != nil {
		return invalidInput("hello: ", err)
	}
	if tr == overHTTP && len(h.Breakers) == 0 {
		// A websocket agent may connect before it has a breaker; an HTTP
		// request carries a batch about declared breakers, and an empty
		// list would forget every breaker of the instance.
		return invalidInput("hello: ", fmt.Errorf("%w: breakers is empty (HTTP ingest needs the breakers the batch reports)", protocol.ErrInvalid))
	}
	if tokenService != "" && h.Service != tokenService {
		return refuse(cbdash.ErrForbidden, "the agent token is limited to service %q, not %q (forbidden)", tokenService, h.Service)
	}
	return nil
}

// register records a hello received at now and declares the instance to
// live state with session s (nil for HTTP ingest). welcome, when not nil,
// is called with the last stored seq under live state's lock, before s
// becomes the instance's session (see live.State.Hello). It returns that seq and
// the instance's previous session, if another one was attached meanwhile.
func (c *Pipeline) register(ctx context.Context, h *protocol.Hello, s *session, now time.Time, welcome func(last uint64)) (uint64, live.Conn, *refusal) {
	if err := c.store.SaveHello(ctx, *h, now); err != nil {
		c.log.Error("save hello", "err", err)
		if ctx.Err() == nil {
			c.health.storeFailed(err)
		}
		return 0, nil, storeTrouble(err, "collector could not record the hello")
	}
	last, err := c.store.LastSeq(ctx, h.Service, h.Instance, h.StartedAt)
	if err != nil {
		c.log.Error("last seq", "err", err)
		return 0, nil, storeTrouble(err, "collector could not read the last sequence number")
	}
	var w func()
	if welcome != nil {
		w = func() { welcome(last) }
	}
	prev := c.live.Hello(h, last, conn(s), now, w)
	c.fleet.Hello(ctx, h, last, now, s != nil)
	return last, prev, nil
}

// admitBatch validates a batch of the agent process that sent hello h,
// received at now.
func (c *Pipeline) admitBatch(h *protocol.Hello, b *protocol.Batch, now time.Time) *refusal {
	if err := b.Validate(h, now.UnixMilli()); err != nil {
		c.metrics.batches.WithLabelValues("refused").Inc()
		return invalidInput("", err)
	}
	return nil
}

// toLive applies a validated batch to live state: queued to the apply
// loop (websocket: false when ctx ended first), or at once (HTTP: the
// response then reflects it).
func (c *Pipeline) toLive(ctx context.Context, k live.Key, b *protocol.Batch, at time.Time, skew int64, tr transport) bool {
	r := live.Update{Key: k, Batch: b, At: at, Skew: skew}
	c.fleet.Batch(r)
	if tr == overHTTP {
		c.live.ApplyNow(r)
		return true
	}
	return c.live.Enqueue(ctx, r)
}

// MaxStoreAttempts is how many times one batch may fail to be stored,
// with an error the same batch will meet again (store.Transient false),
// before it may be refused for good: the agent then drops it (counting
// it in dropped.batches) and the batches after it are stored. It is
// refused only while the store is not failing and a probe run since its
// previous failure succeeded (storehealth.go): a store that fails every
// batch never has one dropped.
const MaxStoreAttempts = 3

// failKey names one batch of one agent process.
type failKey struct {
	k         live.Key
	startedAt int64
	seq       uint64
}

// maxFailKeys bounds the failed batches remembered.
const maxFailKeys = 10000

// save commits batch b of the agent process (k, startedAt), received at
// at, and then counts it and publishes the commands it answered. stored
// is false for a duplicate. A failure is retry-later (the agent resends),
// except a batch refused for good (giveUp; see MaxStoreAttempts).
func (c *Pipeline) save(ctx context.Context, k live.Key, startedAt int64, b *protocol.Batch, at time.Time) (stored bool, r *refusal) {
	start := time.Now()
	stored, err := c.store.SaveBatch(ctx, k.Service, k.Instance, startedAt, *b, at)
	if err == nil {
		c.saved(k, startedAt, b, stored, start)
		return stored, nil
	}
	return false, c.saveFailed(k, startedAt, b, err, ctx.Err() != nil)
}

// saved does what follows a committed batch (stored false: a
// duplicate): it forgets the batch's failures and counts it.
func (c *Pipeline) saved(k live.Key, startedAt int64, b *protocol.Batch, stored bool, start time.Time) {
	c.health.committed(failKey{k, startedAt, b.Seq})
	c.afterSave(b, stored, start, k)
}

// saveFailed is the refusal for a batch the store failed to save with
// err; canceled: the caller's context was done. It records the failure
// (storeHealth.failed): a batch refused for good is answered giveUp,
// any other failure is a retry-later that asks the agent to come back
// after StoreRetryAfter. A session calls it on its receiving goroutine
// (session.landed).
func (c *Pipeline) saveFailed(k live.Key, startedAt int64, b *protocol.Batch, err error, canceled bool) *refusal {
	c.metrics.batches.WithLabelValues("failed").Inc()
	if !canceled {
		c.log.Error("save batch", "service", k.Service, "instance", k.Instance, "seq", b.Seq, "err", err)
	}
	rf := storeTrouble(err, "collector could not store batch %d", b.Seq)
	if canceled {
		return rf
	}
	if c.health.failed(failKey{k, startedAt, b.Seq}, err) {
		c.metrics.batches.WithLabelValues("refused").Inc()
		return &refusal{Kind: cbdash.ErrInvalid, giveUp: true, Cause: err,
			Reason: truncate(fmt.Sprintf("batch %d could not be stored in %d attempts while the store took other batches (%v); it is refused for good", b.Seq, MaxStoreAttempts, err), 500)}
	}
	return rf
}

// pending returns the commands waiting for an instance, as sent at now.
func (c *Pipeline) pending(ctx context.Context, k live.Key, now time.Time) []protocol.Command {
	cmds, err := c.store.PendingCommands(ctx, k.Service, k.Instance, now)
	if err != nil {
		c.log.Error("pending commands", "err", err)
		return nil
	}
	out := make([]protocol.Command, 0, len(cmds))
	for _, cmd := range cmds {
		out = append(out, WireCommand(cmd, now))
	}
	return out
}

// afterSave counts a committed batch (for the holds covering its breakers
// too: counted once it is stored, so exactly once) and publishes the
// commands it answered.
func (c *Pipeline) afterSave(b *protocol.Batch, stored bool, start time.Time, k live.Key) {
	c.metrics.commit.Observe(time.Since(start).Seconds())
	if !stored {
		c.metrics.batches.WithLabelValues("duplicate").Inc()
		return
	}
	c.metrics.batches.WithLabelValues("stored").Inc()
	c.metrics.windows.Add(float64(len(b.Windows)))
	c.metrics.transitions.Add(float64(len(b.Transitions)))
	if b.SentAt > 0 {
		c.metrics.lag.Observe(max(0, float64(c.now().UnixMilli()-b.SentAt)/1000))
	}
	c.metrics.agentDropped(b.Dropped)
	if len(b.Windows) > 0 {
		c.holds.Observe(k, b.Windows)
	}
	if len(b.CommandResults) > 0 {
		c.commands.Results(k, b.CommandResults)
	}
}

// Clock skew. An agent's clock is its own: the collector measures it from
// every batch, as sent_at against the batch's receipt (which includes the
// network delay, so the largest sample of the last minute or two is the
// estimate: resent batches keep their first sent_at and only lower it).
// An agent ahead of the collector by more than skewTolerance has its
// batch's times moved back by the estimate before they are applied and
// stored (its reports then land in the seconds the collector received
// them in, not minutes in the future). An agent behind is stored as it
// reports (late data is merged exactly), and live state counts its
// reports in the seconds they were received, so it does not drop out of
// the last minute. Nothing is refused for the skew alone (see
// protocol.Batch.Validate).

// skewTolerance is the skew below which an agent's times are used as they
// are.
const skewTolerance = live.SkewTolerance

// skewPeriod is how long one period of the estimate lasts; the estimate
// is the largest sample of the current and the previous period.
const skewPeriod = time.Minute

// skewEst is the skew estimate of one instance.
type skewEst struct {
	mu        sync.Mutex
	period    int64 // receipt (Unix ms) that started the current period
	cur, prev int64
	started   bool
	hasPrev   bool
}

// observe adds the sample of a batch sent at sentAt (agent ms) and
// received at at (collector ms) and returns the estimate: the agent's
// clock minus the collector's, in ms.
func (e *skewEst) observe(sentAt, at int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	sample := sentAt - at
	switch {
	case !e.started:
		e.started, e.period, e.cur = true, at, sample
	case at-e.period >= skewPeriod.Milliseconds():
		e.prev, e.hasPrev = e.cur, true
		e.period, e.cur = at, sample
	default:
		e.cur = max(e.cur, sample)
	}
	if e.hasPrev {
		return max(e.cur, e.prev)
	}
	return e.cur
}

// skewOf returns the skew estimate of an instance, made on first use.
func (c *Pipeline) skewOf(k live.Key) *skewEst {
	if e, ok := c.skews.Load(k); ok {
		return e.(*skewEst)
	}
	e, _ := c.skews.LoadOrStore(k, &skewEst{})
	return e.(*skewEst)
}

// correctClock measures the skew of the agent process that sent b (at
// receipt time at) and returns the batch to apply and store: b itself, or
// for an agent ahead by more than skewTolerance a copy with every time
// moved back by the skew. skew is the estimate (agent minus collector, ms),
// 0 when b has no sent_at.
func (c *Pipeline) correctClock(k live.Key, b *protocol.Batch, at time.Time) (out *protocol.Batch, skew int64) {
	if b.SentAt <= 0 {
		return b, 0
	}
	skew = c.skewOf(k).observe(b.SentAt, at.UnixMilli())
	if skew <= skewTolerance.Milliseconds() {
		return b, skew
	}
	c.metrics.batches.WithLabelValues("clock_corrected").Inc()
	return shiftTimes(b, skew), skew
}

// shiftTimes returns a copy of b with every time moved back by d ms
// (never below 0).
func shiftTimes(b *protocol.Batch, d int64) *protocol.Batch {
	back := func(t int64) int64 {
		if t <= 0 {
			return t
		}
		return max(0, t-d)
	}
	o := *b
	o.SentAt = back(b.SentAt)
	o.Transitions = slices.Clone(b.Transitions)
	for i := range o.Transitions {
		t := &o.Transitions[i]
		t.At = back(t.At)
		t.Cause.ExpiresAt = back(t.Cause.ExpiresAt)
	}
	o.ShadowTransitions = slices.Clone(b.ShadowTransitions)
	for i := range o.ShadowTransitions {
		o.ShadowTransitions[i].At = back(o.ShadowTransitions[i].At)
	}
	o.Windows = slices.Clone(b.Windows)
	for i := range o.Windows {
		w := &o.Windows[i]
		w.Start = back(w.Start)
		w.ForcedUntil = back(w.ForcedUntil)
	}
	o.CommandResults = slices.Clone(b.CommandResults)
	for i := range o.CommandResults {
		o.CommandResults[i].At = back(o.CommandResults[i].At)
	}
	if b.Dropped != nil && len(b.Dropped.Lost) > 0 {
		d := *b.Dropped
		d.Lost = slices.Clone(d.Lost)
		for i := range d.Lost {
			l := &d.Lost[i]
			l.Start, l.End = back(l.Start), max(back(l.End), back(l.Start)+1)
		}
		o.Dropped = &d
	}
	return &o
}
