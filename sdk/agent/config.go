package agent

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// Config configures an Agent. Only URL (or URLs) and Service are
// required; every other zero field means its documented default.
type Config struct {
	// URL is the collector's agent endpoint, ws:// or wss://, for example
	// ws://127.0.0.1:8080/api/v1/agent. wss uses TLS (see HTTPClient).
	// It is ignored when URLs is not empty.
	URL string
	// URLs are the agent endpoints of several collectors sharing one
	// database, each as URL; when not empty it takes precedence over URL.
	// The agent connects to one of them, starting at one picked by a hash
	// of Service and Instance (so that a fleet splits across them), and
	// when a connection fails (dial error, the connection lost, no welcome
	// within HandshakeTimeout, no acknowledgement for 30 s) it tries the
	// next one in order after its usual backoff, keeping its buffer and
	// resending what the collector has not acknowledged. The one the hash
	// picks is its preferred collector: connected to another, the agent
	// moves back to it once it has been ready for FailbackAfter. At most
	// 64.
	URLs []string
	// HandshakeTimeout bounds the dial, the hello and the wait for the
	// collector's welcome; a collector that does not welcome the agent
	// within it counts as down. 0 means 10s.
	HandshakeTimeout time.Duration
	// Token is the agent token, sent as "Authorization: Bearer <token>".
	// Empty sends no Authorization header.
	Token string
	// Service names the service this process is an instance of.
	Service string
	// Instance identifies this process among the service's instances.
	// Empty means "<hostname>-<pid>".
	Instance string
	// Labels describe the instance (region, version, team...); at most
	// protocol.MaxLabels.
	Labels map[string]string
	// ReportInterval is how often a breaker with activity sends a window
	// report. 0 means 1s.
	ReportInterval time.Duration
	// IdleReportInterval is how often a breaker without calls or state
	// change still reports its state. 0 means 10s; it is at least
	// ReportInterval.
	IdleReportInterval time.Duration
	// BufferBytes bounds the encoded size of what the agent holds for the
	// collector (pending reports and unacknowledged batches). 0 means
	// 4 MiB; at least 64 KiB.
	BufferBytes int
	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// connection attempts (full jitter within [d/2, d]). 0 means 250ms and
	// 30s. Three failures wait otherwise, without growing the backoff
	// (docs/protocol.md, "Reconnecting"): a fatal error with retry that
	// carries retry_after_ms (protocol.Error.RetryAfterMillis) waits a
	// random time in [retry_after_ms, 1.5*retry_after_ms], at least 100ms
	// and at most ReconnectMax; a dial nothing answered (connection
	// refused, host or network unreachable: no collector listens) waits
	// as the backoff but at most 1s (and ReconnectMax); after a refusal
	// for good (a fatal error without retry: a bad or revoked token, a
	// hello over a quota of its token or service), which the agent logs
	// as an error, the next attempt waits ReconnectMax, as
	// docs/protocol.md asks. Failed attempts are logged as a warning at
	// the first failure, then at most once per 30s (of Clock) with their
	// count, until a connection does its job again.
	ReconnectMin, ReconnectMax time.Duration
	// FailbackAfter applies with several URLs, while the agent is connected
	// to another collector than its preferred one (the one the hash picks,
	// see URLs): about every FailbackAfter/3 (a period drawn per connection
	// within ±25% of it, so that a fleet does not move at once; ticks of
	// Clock) the agent asks the preferred collector's GET /readyz (its URL
	// with ws:// made http:// and wss:// https://, and "/api/v1/agent" in
	// its path made "/readyz"; sent with HTTPClient, without the token,
	// each check on a connection of its own, closed after it, and bounded
	// by HandshakeTimeout). Once that answered 200 on
	// at least 3 checks in a row spanning at least FailbackAfter (any other
	// answer, or no answer, starts the count again), the agent stops
	// writing batches, waits up to 10s for the collector it is on to
	// acknowledge what it was sent, closes that connection normally
	// (status 1000) and connects to the preferred one at once, keeping its
	// buffer: anything unacknowledged is resent there, and the welcome's
	// last_seq keeps what was already stored from being stored twice.
	// 0 means 30s; a negative value disables failback (the agent stays
	// where it is until that connection fails); a positive value under 1s
	// is refused.
	FailbackAfter time.Duration
	// Logger receives what the agent has to say (refused batches, bad
	// input from the wire, reconnects). nil discards it.
	Logger *slog.Logger
	// HTTPClient makes the websocket handshake; set its Transport's
	// TLSClientConfig for wss with a private CA. nil means a client with
	// default settings.
	HTTPClient *http.Client
	// Clock is the time source for timestamps, report ticks, the failback
	// checks (FailbackAfter) and the pacing of the reconnect warnings; the
	// reconnect backoff and the connection's timeouts are real time. nil
	// means the system clock.
	Clock Clock
}

// Clock is the agent's time source. A Clock must be safe for concurrent
// use. Tests inject a virtual clock to drive report ticks.
type Clock interface {
	Now() time.Time
	// NewTicker delivers the time on the returned channel every d until
	// stop is called, like time.NewTicker (ticks may be dropped for a slow
	// receiver).
	NewTicker(d time.Duration) (ticks <-chan time.Time, stop func())
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("agent: invalid config")

const (
	minBufferBytes = 64 << 10
	maxURLs        = 64
)

func isWebsocketURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "ws" || u.Scheme == "wss") && u.Host != ""
}

// firstURL is the index in urls where an instance starts: a hash of its
// service and instance names, so that the instances of a fleet given the
// same list spread over it.
func firstURL(service, instance string, urls []string) int {
	h := fnv.New32a()
	h.Write([]byte(service))
	h.Write([]byte{0})
	h.Write([]byte(instance))
	return int(h.Sum32() % uint32(len(urls)))
}

// withDefaults validates c and returns it with defaults applied. The error
// names the bad field and wraps ErrInvalidConfig.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case len(c.URLs) > maxURLs:
		return bad("URLs: %d URLs (at most %d)", len(c.URLs), maxURLs)
	case len(c.URLs) > 0:
		c.URLs = slices.Clone(c.URLs) // the caller may reuse its slice
		for i, raw := range c.URLs {
			if !isWebsocketURL(raw) {
				return bad("URLs[%d] %q is not a ws:// or wss:// URL", i, raw)
			}
		}
	case !isWebsocketURL(c.URL):
		return bad("URL %q is not a ws:// or wss:// URL", c.URL)
	default:
		c.URLs = []string{c.URL}
	}
	if err := checkName("Service", c.Service); err != nil {
		return bad("%v", err)
	}
	if strings.Contains(c.Service, "/") {
		return bad("Service %q contains a slash (dependencies are named service/breaker)", c.Service)
	}
	if c.Instance == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "unknown"
		}
		c.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if err := checkName("Instance", c.Instance); err != nil {
		return bad("%v", err)
	}
	c.Labels = maps.Clone(c.Labels) // the caller may reuse its map
	if len(c.Labels) > protocol.MaxLabels {
		return bad("Labels: %d labels (at most %d)", len(c.Labels), protocol.MaxLabels)
	}
	for k, v := range c.Labels {
		if err := checkName(fmt.Sprintf("Labels: key %q", k), k); err != nil {
			return bad("%v", err)
		}
		if err := checkName(fmt.Sprintf("Labels[%q]", k), v); err != nil {
			return bad("%v", err)
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"ReportInterval", &c.ReportInterval, time.Second},
		{"IdleReportInterval", &c.IdleReportInterval, 10 * time.Second},
		{"ReconnectMin", &c.ReconnectMin, 250 * time.Millisecond},
		{"ReconnectMax", &c.ReconnectMax, 30 * time.Second},
		{"HandshakeTimeout", &c.HandshakeTimeout, 10 * time.Second},
	} {
		if *d.v < 0 {
			return bad("%s is negative (%v)", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.ReportInterval < time.Millisecond || c.ReportInterval > protocol.MaxWindowMillis*time.Millisecond {
		return bad("ReportInterval %v is outside 1ms..1h", c.ReportInterval)
	}
	c.IdleReportInterval = max(c.IdleReportInterval, c.ReportInterval)
	if c.IdleReportInterval > protocol.MaxWindowMillis*time.Millisecond {
		return bad("IdleReportInterval %v is longer than 1h", c.IdleReportInterval)
	}
	switch {
	case c.FailbackAfter == 0:
		c.FailbackAfter = 30 * time.Second
	case c.FailbackAfter > 0 && c.FailbackAfter < time.Second:
		return bad("FailbackAfter %v is below 1s (negative disables failback)", c.FailbackAfter)
	}
	if c.ReconnectMax < c.ReconnectMin {
		return bad("ReconnectMax %v is shorter than ReconnectMin %v", c.ReconnectMax, c.ReconnectMin)
	}
	switch {
	case c.BufferBytes < 0:
		return bad("BufferBytes is negative (%d)", c.BufferBytes)
	case c.BufferBytes == 0:
		c.BufferBytes = 4 << 20
	case c.BufferBytes < minBufferBytes:
		return bad("BufferBytes %d is below %d", c.BufferBytes, minBufferBytes)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	return c, nil
}

// checkName checks a name the hello carries as the collector does
// (protocol.CheckName: not blank, at most protocol.MaxNameLen bytes, no
// control, bidirectional, invisible or non-ASCII space character, no space
// at either end, no combining mark first), so that the
// agent never sends a hello the collector refuses. The error starts with
// field.
func checkName(field, v string) error {
	if err := protocol.CheckName(field, v); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), protocol.ErrInvalid.Error()+": "))
	}
	return nil
}
