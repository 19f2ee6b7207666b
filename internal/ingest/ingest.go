package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/live"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// retryAfterSeconds is the Retry-After of a 503 answer to an agent, but
// for the store's trouble (StoreRetryAfter, rounded up to seconds: 1).
const retryAfterSeconds = 5

// ServeIngest serves POST /api/v1/ingest: a protocol.IngestRequest (the
// hello naming the instance and one batch) with the agent token as
// "Authorization: Bearer". It runs the ingest pipeline (see pipeline.go)
// and answers protocol.IngestResponse after the batch is committed (a
// duplicate is acknowledged without being stored again, with the highest
// seq stored), with the commands pending for the instance, among them the
// holds that govern its breakers (applied at every ingest, as at every
// websocket hello). Errors, as
// {"error": reason}: 401 bad token, 403 token limited to another service,
// 400 (ErrInvalid) for a malformed or invalid request (nothing of it is
// stored; the same body is refused again; also a batch refused for good,
// see MaxStoreAttempts), 503 with Retry-After before Open (5 s) or when
// the store cannot commit now (1 s; retry the same body). The errors
// are returned, nothing written, for the server's error handler (503:
// cbdash.ErrUnavailable, Retry-After already set).
func (c *Pipeline) ServeIngest(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if !c.isReady() {
		return c.ingestRefused(w, retryLater(nil, "collector is not ready"))
	}
	svc, rf := c.authorize(ctx, bearer(r))
	if rf != nil {
		return c.ingestRefused(w, rf)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, protocol.MaxMessageBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return invalidf("body is larger than %d bytes", protocol.MaxMessageBytes)
		}
		return invalidf("reading the body: %v", err)
	}
	req, err := decodeIngest(body)
	if err != nil {
		return invalidf("%s", err)
	}
	resp, rf := c.ingest(ctx, svc, store.AgentTokenID(bearer(r)), &req.Hello, &req.Batch)
	if rf != nil {
		return c.ingestRefused(w, rf)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	return json.NewEncoder(w).Encode(resp)
}

// ingest runs the pipeline's steps after the token (see pipeline.go) for
// one hello and batch of an agent whose token is limited to svc ("" =
// any), as HTTP ingest does: the batch is applied to live state and
// committed before it returns, and the response carries the pending
// commands. tokenID is the agent token's (store.AgentTokenID), whose
// Limits the hello must fit; "" for a source the server itself reads
// (internal/source), which an administrator configured.
func (c *Pipeline) ingest(ctx context.Context, svc, tokenID string, h *protocol.Hello, b *protocol.Batch) (protocol.IngestResponse, *refusal) {
	if rf := c.admitHello(h, svc, overHTTP); rf != nil {
		return protocol.IngestResponse{}, rf
	}
	now := c.now()
	if rf := c.admitBatch(h, b, now); rf != nil {
		return protocol.IngestResponse{}, refuse(cbdash.ErrInvalid, "batch %d: %s", b.Seq, rf.Reason)
	}
	k := live.Key{Service: h.Service, Instance: h.Instance}
	if !c.live.SameHello(h) {
		if tokenID != "" {
			if rf := c.admitLimits(tokenID, h, now); rf != nil {
				return protocol.IngestResponse{}, rf
			}
		}
		if _, _, rf := c.register(ctx, h, nil, now, nil); rf != nil {
			return protocol.IngestResponse{}, rf
		}
	}
	cb, skew := c.correctClock(k, b, now)
	cb = c.vetCauses(ctx, k, cb)
	c.toLive(ctx, k, cb, now, skew, overHTTP)
	c.metrics.queue.Inc()
	stored, rf := c.save(ctx, k, h.StartedAt, cb, now)
	c.metrics.queue.Dec()
	if rf != nil {
		return protocol.IngestResponse{}, rf
	}
	resp := protocol.IngestResponse{AckedSeq: b.Seq}
	if !stored {
		// A duplicate: acknowledged with the highest seq stored.
		if last, err := c.store.LastSeq(ctx, h.Service, h.Instance, h.StartedAt); err == nil {
			resp.AckedSeq = max(last, b.Seq)
		}
	}
	c.holds.Pull(ctx, k) // no session: the holds it needs go out as pending commands
	resp.Commands = c.pending(ctx, k, now)
	return resp, nil
}

// ingestRefused answers a refusal: its kind's status (a retry-later one is
// 503 with Retry-After) and its reason.
func (c *Pipeline) ingestRefused(w http.ResponseWriter, rf *refusal) error {
	if !rf.Permanent() {
		after := retryAfterSeconds
		if rf.retryAfter > 0 {
			after = int(max(1, (rf.retryAfter+time.Second-1)/time.Second))
		}
		w.Header().Set("Retry-After", strconv.Itoa(after))
		return unavailable(rf.Reason)
	}
	return fmt.Errorf("%w", rf)
}
