package alert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
)

// ErrInvalidConfig is wrapped by every error of Config validation.
var ErrInvalidConfig = errors.New("invalid alert config")

// Log stores delivery log entries. *store.Store implements it.
type Log interface {
	SaveAlertDelivery(ctx context.Context, d cbdash.AlertDelivery) (int64, error)
}

// DeliveryConfig says how webhooks are called. Its zero value works.
type DeliveryConfig struct {
	// Client makes the calls; nil = a client that follows no redirect,
	// gives an attempt 5 s and, unless AllowPrivate, refuses to connect
	// to a private destination (see webhook.go). A Client given here is
	// used as it is.
	Client *http.Client
	// AllowPrivate lets webhooks reach loopback, private, link-local,
	// unspecified and multicast addresses (the serve flag
	// --allow-private-webhooks); false refuses them when a rule is saved
	// and at every connection.
	AllowPrivate bool
	// Attempts is how many times a call is tried (0 = 5).
	Attempts int
	// Backoff is the wait after the first failed attempt, doubled after
	// each further one (0 = 1 s), up to MaxBackoff (0 = 1 min).
	Backoff, MaxBackoff time.Duration
	// Clock stamps delivery log entries and times the backoff waits
	// between attempts; nil = clock.System().
	Clock  clock.Clock
	Logger *slog.Logger // nil = discard
	// ExternalURL is the dashboard's address payloads link to (Link);
	// "" = no link. Service sets it from Config.ExternalURL.
	ExternalURL string
}

func (c DeliveryConfig) validate() error {
	switch {
	case c.Attempts < 0:
		return fmt.Errorf("%w: Attempts is negative", ErrInvalidConfig)
	case c.Backoff < 0:
		return fmt.Errorf("%w: Backoff is negative", ErrInvalidConfig)
	case c.MaxBackoff < 0:
		return fmt.Errorf("%w: MaxBackoff is negative", ErrInvalidConfig)
	}
	return nil
}

func (c *DeliveryConfig) defaults() {
	if c.Client == nil {
		c.Client = newClient(c.AllowPrivate)
	}
	if c.Attempts == 0 {
		c.Attempts = 5
	}
	if c.Backoff == 0 {
		c.Backoff = time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = time.Minute
	}
	c.Clock = clock.OrSystem(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Deliverer posts notifications to webhooks with retries and records each
// in the delivery log. Deliver is safe for concurrent use, but Service calls
// it from one goroutine so that a resolve never overtakes its alert.
type Deliverer struct {
	cfg DeliveryConfig
	log Log
}

// NewDeliverer returns a Deliverer writing to log (nil = no log), or an
// error wrapping ErrInvalidConfig.
func NewDeliverer(cfg DeliveryConfig, log Log) (*Deliverer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	return &Deliverer{cfg: cfg, log: log}, nil
}

// errPermanent marks an answer that retrying will not change (4xx other
// than 408 and 429).
var errPermanent = errors.New("permanent failure")

// Deliver posts n to its rule's webhook, retrying network errors, 408, 429
// and 5xx with exponential backoff, and logs the outcome. An attempt
// under way when ctx ends finishes (within the client's timeout); none
// starts after. It returns the log entry (OK when an attempt succeeded);
// its error is ctx's error when ctx ended meanwhile, or the delivery log's
// error.
func (d *Deliverer) Deliver(ctx context.Context, n Notification) (cbdash.AlertDelivery, error) {
	entry := cbdash.AlertDelivery{RuleID: n.Rule.ID, Subject: n.Subject, Event: n.Event, URL: n.Rule.WebhookURL}
	body, err := Body(n, d.cfg.ExternalURL)
	if err != nil {
		return entry, fmt.Errorf("alert: render body: %w", err)
	}
	entry.Body = string(body)
	bo := d.backOff()
	for attempt := 1; ; attempt++ {
		entry.Attempts = attempt
		// An attempt under way finishes (within the client's timeout)
		// even when ctx ends meanwhile: a webhook that received the call
		// gets it acknowledged, and is not called again by the next
		// leader (issue 28). No attempt starts after ctx ended.
		status, err := d.post(context.WithoutCancel(ctx), postURL(n.Rule), body)
		entry.Status = status
		if err == nil {
			entry.OK, entry.Error = true, ""
			break
		}
		entry.Error = err.Error()
		if errors.Is(err, errPermanent) || attempt >= d.cfg.Attempts || ctx.Err() != nil {
			break
		}
		wait := bo.NextBackOff()
		d.cfg.Logger.Warn("alert webhook failed, retrying", "rule", n.Rule.ID, "url", MaskURL(n.Rule.WebhookURL), "attempt", attempt, "wait", wait, "err", err)
		if !clock.Sleep(d.cfg.Clock, wait, ctx.Done()) {
			break
		}
	}
	entry.At = d.cfg.Clock.Now().UTC()
	if !entry.OK {
		d.cfg.Logger.Error("alert webhook gave up", "rule", n.Rule.ID, "url", MaskURL(n.Rule.WebhookURL), "attempts", entry.Attempts, "err", entry.Error)
	}
	if d.log != nil {
		// The log entry is written even when ctx ended: it records the give-up.
		id, err := d.log.SaveAlertDelivery(context.WithoutCancel(ctx), entry)
		if err != nil {
			return entry, fmt.Errorf("alert: log delivery: %w", err)
		}
		entry.ID = id
	}
	return entry, ctx.Err()
}

// backOff returns the waits between attempts: Backoff, then doubled after
// each failed attempt up to MaxBackoff, with no jitter (one rule per
// deployment calls one webhook, so there is no herd to spread). The waits
// themselves are on the injected clock (clock.Sleep): backoff.Retry would
// wait on the system's timers.
func (d *Deliverer) backOff() *backoff.ExponentialBackOff {
	bo := &backoff.ExponentialBackOff{InitialInterval: d.cfg.Backoff, Multiplier: 2, MaxInterval: d.cfg.MaxBackoff}
	bo.Reset()
	return bo
}

func (d *Deliverer) post(ctx context.Context, url string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%w: the webhook URL does not parse", errPermanent)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cbdash-alert/1")
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		err = callError(err)
		if errors.Is(err, ErrPrivateDestination) {
			return 0, fmt.Errorf("%w: %w", errPermanent, err)
		}
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return resp.StatusCode, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return resp.StatusCode, fmt.Errorf("%w: webhook answered %s (redirects are not followed)", errPermanent, resp.Status)
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return resp.StatusCode, fmt.Errorf("webhook answered %s", resp.Status)
	default:
		return resp.StatusCode, fmt.Errorf("%w: webhook answered %s", errPermanent, resp.Status)
	}
}
