package collector

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/labstack/echo/v4"
)

// handleIngest serves POST /api/v1/ingest: a protocol.IngestRequest (the
// hello naming the instance and one batch) with the agent token as
// "Authorization: Bearer". It answers protocol.IngestResponse after the
// batch is committed (a duplicate is acknowledged without being stored
// again), with the commands pending for the instance. Errors: 401 bad
// token, 403 token limited to another service, 400 (ErrInvalid) for a
// malformed or invalid request (nothing of it is stored), 503 before Run.
func (c *Collector) handleIngest(ec echo.Context) error {
	r := ec.Request()
	ctx := r.Context()
	if !c.isReady() {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "collector is not ready")
	}
	svc, err := c.store.CheckAgentToken(ctx, bearer(r))
	if err != nil {
		return fmt.Errorf("agent token: %w", err)
	}
	body, err := io.ReadAll(http.MaxBytesReader(ec.Response(), r.Body, protocol.MaxMessageBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return invalidf("body is larger than %d bytes", protocol.MaxMessageBytes)
		}
		return invalidf("reading the body: %v", err)
	}
	var req protocol.IngestRequest
	if err := strictUnmarshal(body, &req); err != nil {
		return invalidf("ingest request: %s", jsonReason(err))
	}
	h, b := &req.Hello, &req.Batch
	if err := h.Validate(); err != nil {
		return fmt.Errorf("%w: hello: %v", cbdash.ErrInvalid, err)
	}
	if svc != "" && h.Service != svc {
		return fmt.Errorf("the agent token is limited to service %q: %w", svc, cbdash.ErrForbidden)
	}
	now := c.now()
	if err := b.Validate(h, now.UnixMilli()); err != nil {
		c.metrics.batches.WithLabelValues("refused").Inc()
		return fmt.Errorf("%w: batch %d: %v", cbdash.ErrInvalid, b.Seq, err)
	}
	if !c.live.sameHello(h) {
		if err := c.store.SaveHello(ctx, *h, now); err != nil {
			return fmt.Errorf("record hello: %w", err)
		}
		last, err := c.store.LastSeq(ctx, h.Service, h.Instance, h.StartedAt)
		if err != nil {
			return fmt.Errorf("last seq: %w", err)
		}
		c.live.hello(h, last, nil, now, nil)
	}
	k := instKey{h.Service, h.Instance}
	c.live.apply(k, b, now)
	start := time.Now() // real time: the commit duration metric
	c.metrics.queue.Inc()
	stored, err := c.store.SaveBatch(ctx, h.Service, h.Instance, h.StartedAt, *b, now)
	c.metrics.queue.Dec()
	if err != nil {
		c.metrics.batches.WithLabelValues("failed").Inc()
		return fmt.Errorf("store batch: %w", err)
	}
	c.afterSave(b, 1, stored, start, h.Instance)
	resp := protocol.IngestResponse{AckedSeq: b.Seq}
	cmds, err := c.store.PendingCommands(ctx, h.Service, h.Instance, now)
	if err != nil {
		c.log.Error("pending commands", "err", err)
	}
	for _, cmd := range cmds {
		resp.Commands = append(resp.Commands, wireCommand(cmd, now))
	}
	return ec.JSON(http.StatusOK, resp)
}
