package web

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
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

// liveSlots counts the open live sockets against LiveLimits, and what
// they hold. Safe for concurrent use.
type liveSlots struct {
	lim LiveLimits

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

func newLiveSlots(lim LiveLimits) *liveSlots {
	lim.setDefaults()
	return &liveSlots{lim: lim, bySession: map[string]int{}, byAddress: map[string]int{}}
}

// take takes a slot for a socket of session ("" = none) from address; it
// returns the function that gives it back, or the reason it was refused.
func (l *liveSlots) take(session, address string) (release func(), refused string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.lim.Total:
		return nil, fmt.Sprintf("the server has %d live connections, its limit (serve flag --max-live)", l.total)
	case l.byAddress[address] >= l.lim.PerAddress:
		return nil, fmt.Sprintf("your address has %d live connections, the limit per address (serve flag --max-live-per-address)", l.byAddress[address])
	case session != "" && l.bySession[session] >= l.lim.PerSession:
		return nil, fmt.Sprintf("your session has %d live connections, the limit per session (serve flag --max-live-per-session); close a tab", l.bySession[session])
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
