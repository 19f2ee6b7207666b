package web

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// LiveLimits cap the /live websockets, each of which holds a subscription
// to the collector and its own goroutines and buffers: one viewer (or
// anyone, with anonymous viewing) opening a thousand of them would slow
// every agent's transitions. A socket over a cap is refused before the
// upgrade with 429 and the cap it hit. The zero value of each field is
// its default; the serve flags of the same names set them.
type LiveLimits struct {
	// PerSession caps the sockets of one login session or API token
	// (anonymous viewers have none: PerAddress caps them); 0 = 8.
	PerSession int
	// PerAddress caps the sockets of one client address (as
	// TrustedProxies makes it out); 0 = 64, for offices behind one NAT.
	PerAddress int
	// Total caps the sockets of the server; 0 = 500.
	Total int
}

func (l *LiveLimits) setDefaults() {
	if l.PerSession == 0 {
		l.PerSession = 8
	}
	if l.PerAddress == 0 {
		l.PerAddress = 64
	}
	if l.Total == 0 {
		l.Total = 500
	}
}

// liveSlots counts open streams (the /live sockets, the /api/v1/events
// streams) against LiveLimits: one mechanism, one instance per kind of
// stream, each with its own limits and words. The /live instance also
// counts what its sockets hold (queued) and keeps the fleet index the live
// overviews share. Safe for concurrent use.
type liveSlots struct {
	lim   LiveLimits
	names slotNames
	// refused counts refusals by limit ("total", "address", "session");
	// nil = not counted.
	refused *prometheus.CounterVec

	// queued is the bytes of the messages handed to the sockets' writers
	// and not yet written (at most one message a socket, see
	// Server.live), queuedPeak the most it has been; coalesced counts the
	// flushes put off because a socket's writer was still busy.
	queued, queuedPeak, coalesced atomic.Int64

	// index is the fleet the live overviews share, made by the first
	// (Server.fleetIndex).
	indexOnce sync.Once
	index     *fleetIndex

	mu        sync.Mutex
	total     int
	bySession map[string]int
	byAddress map[string]int
}

// slotNames are the words of a kind of stream in its refusals: what
// they are ("live connections"), the serve flags of its three limits,
// and what a session over its limit can do.
type slotNames struct {
	what                                string
	totalFlag, addressFlag, sessionFlag string
	sessionHint                         string
}

// liveNames are the /live sockets' words.
var liveNames = slotNames{what: "live connections", totalFlag: "--max-live", addressFlag: "--max-live-per-address",
	sessionFlag: "--max-live-per-session", sessionHint: "close a tab"}

// eventNames are the /api/v1/events streams' words.
var eventNames = slotNames{what: "event streams", totalFlag: "--max-event-streams", addressFlag: "--max-event-streams-per-address",
	sessionFlag: "--max-event-streams-per-session", sessionHint: "close one of them"}

// newReadSlots counts the reads being answered against lim (see
// ReadLimits): liveSlots without a cap per session.
func newReadSlots(lim ReadLimits, refused *prometheus.CounterVec) *liveSlots {
	lim.setDefaults()
	return newLiveSlots(LiveLimits{PerSession: lim.Total, PerAddress: lim.PerAddress, Total: lim.Total}, readNames, refused)
}

func newLiveSlots(lim LiveLimits, names slotNames, refused *prometheus.CounterVec) *liveSlots {
	lim.setDefaults()
	return &liveSlots{lim: lim, names: names, refused: refused, bySession: map[string]int{}, byAddress: map[string]int{}}
}

// take takes a slot for a socket of session ("" = none) from address; it
// returns the function that gives it back, or the reason it was refused.
func (l *liveSlots) take(session, address string) (release func(), refused string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.names
	switch {
	case l.total >= l.lim.Total:
		l.count("total")
		return nil, fmt.Sprintf("the server has %d %s, its limit (serve flag %s)", l.total, n.what, n.totalFlag)
	case l.byAddress[address] >= l.lim.PerAddress:
		l.count("address")
		return nil, fmt.Sprintf("your address has %d %s, the limit per address (serve flag %s)", l.byAddress[address], n.what, n.addressFlag)
	case session != "" && l.bySession[session] >= l.lim.PerSession:
		l.count("session")
		return nil, fmt.Sprintf("your session has %d %s, the limit per session (serve flag %s); %s", l.bySession[session], n.what, n.sessionFlag, n.sessionHint)
	}
	l.total++
	l.byAddress[address]++
	if session != "" {
		l.bySession[session]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.byAddress[address]--; l.byAddress[address] <= 0 {
				delete(l.byAddress, address)
			}
			if session != "" {
				if l.bySession[session]--; l.bySession[session] <= 0 {
					delete(l.bySession, session)
				}
			}
		})
	}, ""
}

// open is the number of slots taken.
func (l *liveSlots) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// count counts a refusal by the limit it hit.
func (l *liveSlots) count(limit string) {
	if l.refused != nil {
		l.refused.WithLabelValues(limit).Inc()
	}
}

// liveSessionKey names the credentials of c (a session cookie or an API
// token, hashed: the key is kept in memory), "" for an anonymous caller.
func liveSessionKey(c echo.Context) string {
	var secret string
	switch via, _ := c.Get(viaKey).(string); via {
	case "token":
		secret = "t:" + strings.TrimSpace(strings.TrimPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer "))
	case "session":
		if ck, err := c.Cookie(sessionCookie); err == nil {
			secret = "s:" + ck.Value
		}
	}
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:12])
}

// hold counts n bytes handed to a socket's writer.
func (l *liveSlots) hold(n int) {
	q := l.queued.Add(int64(n))
	for {
		p := l.queuedPeak.Load()
		if q <= p || l.queuedPeak.CompareAndSwap(p, q) {
			return
		}
	}
}
