package ingest

import (
	"context"
	"errors"
	dto "github.com/prometheus/client_model/go"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/store"
)

// A bad batch or a failing store. A batch that fails to be stored is
// either the batch's trouble (it will fail however often it is sent: it
// is refused for good after MaxStoreAttempts, and the agent drops it) or
// the store's (a full disk, PostgreSQL gone, a column renamed or a table
// dropped under the collector: every batch meets it, and dropping them
// would lose them all). The collector tells the two apart with
// storeHealth, fed by every save's outcome, and with Store.Probe, which
// runs every statement a hello and a batch write for a synthetic agent
// in a transaction that is rolled back:
//
//   - the store is failing after an error the environment causes
//     (store.Transient), the same error for batches of two different agent
//     processes (one agent's batches cannot make the store failing), or a
//     probe that failed; every failure starts a probe at once;
//   - while it is failing, /readyz answers 503 (Readiness), no batch is
//     refused for good, and the collector probes the store every
//     StoreProbeEvery (its clock) and at once when a batch commits; the
//     first good probe ends it (/readyz is 200 again within that), and
//     so does a commit when it failed for a transient error;
//   - a batch is refused for good only when it failed MaxStoreAttempts
//     times with an error that is not transient, the store is not
//     failing, and a probe that started after the batch's previous
//     failure succeeded: the store takes a batch of every kind, just not
//     this one.
//
// The fatal retry-later errors the collector sends for its store's
// trouble carry retry_after_ms (StoreRetryAfter): the agents come back
// within a second or two of the store, not at their longest backoff.

// StoreRetryAfter is the retry_after_ms of a fatal retry-later error the
// collector sends for its store's trouble (a batch or a hello that could
// not be written), and the Retry-After of HTTP ingest's 503 then.
const StoreRetryAfter = time.Second

// StoreProbeEvery is how often a collector whose store is failing probes
// it (Store.Probe), on its clock.
const StoreProbeEvery = 250 * time.Millisecond

// prober is the store as the prober sees it (Store.Probe).
type prober interface{ Probe(context.Context) error }

// storeHealth tracks whether the store commits (see above). Its methods
// take no lock across I/O: the probe runs outside mu.
type storeHealth struct {
	mu sync.Mutex
	// failing is why the store is failing, nil when it is not; isFailing
	// mirrors it for the hot path.
	failing   error
	isFailing atomic.Bool
	// gen counts the failures and the probes' starts; probeOK is gen
	// when the last probe that succeeded started (0: none yet).
	gen, probeOK uint64
	// last is the last failure's batch and error text.
	last    failKey
	lastErr string
	// failures are the batches that failed with an error that is not
	// transient and not yet committed nor refused: their count, and gen
	// at their last failure.
	failures map[failKey]failRec
	// wake asks the prober to probe now.
	wake chan struct{}
	// probes counts the probes that ended (tests wait on it: ProbesDone).
	probes uint64
}

type failRec struct {
	count int
	gen   uint64
}

func newStoreHealth() *storeHealth {
	return &storeHealth{wake: make(chan struct{}, 1), failures: make(map[failKey]failRec)}
}

// err is why the store is failing, nil when it is not.
func (h *storeHealth) err() error {
	if !h.isFailing.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing
}

func (h *storeHealth) setFailing(err error) {
	h.failing = err
	h.isFailing.Store(err != nil)
}

// committed records a batch of f that committed: its failures are
// forgotten; a store failing for the environment's sake (a transient
// error: the disk, the server) is not any more, and one failing for
// another reason (a schema the batches do not fit, which one batch
// committing does not prove fixed) is probed at once.
func (h *storeHealth) committed(f failKey) {
	h.mu.Lock()
	if len(h.failures) > 0 {
		delete(h.failures, f)
	}
	wake := false
	if h.failing != nil {
		if store.Transient(h.failing) {
			h.setFailing(nil)
		} else {
			wake = true
		}
	}
	h.mu.Unlock()
	if wake {
		signal(h.wake)
	}
}

// failed records that batch f failed to be stored with err and reports
// whether it is refused for good (see above).
func (h *storeHealth) failed(f failKey, err error) (giveUp bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	msg := err.Error()
	transient := store.Transient(err)
	if !h.isFailing.Load() {
		// A probe says whose trouble it is; and the prober, idle while
		// the store was fine, starts its rounds.
		signal(h.wake)
	}
	if transient || (h.lastErr == msg && (h.last.k != f.k || h.last.startedAt != f.startedAt)) {
		h.setFailing(err)
	}
	h.last, h.lastErr = f, msg
	if transient {
		return false
	}
	if len(h.failures) >= maxFailKeys {
		clear(h.failures)
	}
	r := h.failures[f]
	prev := r.gen
	r.count++
	r.gen = h.gen
	if r.count >= MaxStoreAttempts && h.failing == nil && h.probeOK > prev {
		delete(h.failures, f)
		return true
	}
	h.failures[f] = r
	return false
}

// storeFailed records that a write other than a batch's (a hello) failed
// with err: the store is probed at once.
func (h *storeHealth) storeFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.isFailing.Load() {
		signal(h.wake)
	}
	if store.Transient(err) {
		h.setFailing(err)
	}
}

// probe runs one Store.Probe and records its outcome.
func (h *storeHealth) probe(ctx context.Context, st prober) {
	h.mu.Lock()
	h.gen++
	start := h.gen
	h.mu.Unlock()
	err := st.Probe(ctx)
	if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
		return
	}
	h.mu.Lock()
	if err == nil {
		h.setFailing(nil)
		h.probeOK = start
	} else {
		h.setFailing(err)
	}
	h.probes++
	h.mu.Unlock()
}

// runProber probes the store when asked (wake) and, while it is failing,
// every StoreProbeEvery on clk, until ctx is done.
func (h *storeHealth) runProber(ctx context.Context, clk clock.Clock, st prober, log interface {
	Warn(string, ...any)
	Info(string, ...any)
}) {
	t := clock.NewTimer(clk, time.Hour)
	defer t.Stop()
	for {
		failing := h.isFailing.Load()
		if failing {
			t.Reset(StoreProbeEvery)
		} else {
			t.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		case <-t.C:
		}
		h.probe(ctx, st)
		switch now := h.isFailing.Load(); {
		case now && !failing:
			log.Warn("the store is failing: batches are not acknowledged, /readyz answers 503, agents are asked to come back soon", "err", h.err())
		case !now && failing:
			log.Info("the store commits again")
		}
	}
}

// probedSinceFailures reports whether a probe that started after the
// last failure of every batch remembered has succeeded (tests wait for it
// before resending a failed batch, whose refusal for good depends on it).
func (h *storeHealth) probedSinceFailures() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.failures {
		if r.gen >= h.probeOK {
			return false
		}
	}
	return true
}

// ProbesDone is how many store probes have ended, failed or not (tests
// advance their clock by one probe period and wait for the probe).
func (c *Pipeline) ProbesDone() uint64 {
	c.health.mu.Lock()
	defer c.health.mu.Unlock()
	return c.health.probes
}

// ProbedSinceFailures reports whether a probe that started after the
// last failure of every batch remembered has succeeded: a batch that
// failed is refused for good only then (see MaxStoreAttempts).
func (c *Pipeline) ProbedSinceFailures() bool { return c.health.probedSinceFailures() }

// Batches is cbdash_collector_batches_total of result (stored,
// duplicate, refused, failed, clock_corrected).
func (c *Pipeline) Batches(result string) float64 {
	var m dto.Metric
	if c.metrics.batches.WithLabelValues(result).Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
