package web

import (
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// loginLimiter bounds login attempts per client address, and per user
// name or per device, with token buckets (golang.org/x/time/rate). An
// attempt takes a token from its buckets before the password is checked,
// under one lock, so parallel attempts cannot all be evaluated; a
// successful login gives its tokens back, so only failures add up.
//
// An attempt that presents a valid device cookie of the user (a client
// that logged in as that user before, see device.go) takes from its
// device's bucket only, neither the user's nor its address's: failures
// from elsewhere, which empty the user's bucket or the bucket of an
// address the client shares (an office NAT, a proxy not named in
// --trusted-proxy), do not lock out a client that has proven itself
// (OWASP's "device cookies"). The device's own bucket still limits the
// wrong passwords given with that cookie, so a stolen device cookie
// guesses no faster than LoginBurst, then one per backed-off interval.
// Untrusted clients share the user's bucket and their address's.
//
// While a bucket is empty every attempt is refused. Each evaluated
// failure that leaves a bucket empty doubles the time it takes to refill
// (up to maxBackoff); refusals do not, so a flood of refused tries
// cannot keep a lock in place. A bucket that has refilled completely is
// back at its normal rate. Buckets that are full are forgotten once more
// than maxBuckets are held.
type loginLimiter struct {
	mu     sync.Mutex
	user   bucketSet
	device bucketSet
	addr   bucketSet
}

const (
	maxBuckets = 10000
	maxBackoff = 15 * time.Minute
)

type bucketSet struct {
	burst int
	every time.Duration
	m     map[string]*bucket
}

type bucket struct {
	lim   *rate.Limiter
	every time.Duration // the current refill interval (backed off)
}

func newLoginLimiter(userBurst, addrBurst int, every time.Duration) *loginLimiter {
	return &loginLimiter{
		user:   bucketSet{burst: userBurst, every: every, m: make(map[string]*bucket)},
		device: bucketSet{burst: userBurst, every: every, m: make(map[string]*bucket)},
		addr:   bucketSet{burst: addrBurst, every: every, m: make(map[string]*bucket)},
	}
}

// get returns key's bucket, making it (and forgetting full ones when
// there are too many).
func (b *bucketSet) get(key string, now time.Time) *bucket {
	if k, ok := b.m[key]; ok {
		if k.lim.TokensAt(now) >= float64(b.burst) && k.every != b.every { // refilled: forgiven
			k.every = b.every
			k.lim.SetLimitAt(now, rate.Every(b.every))
		}
		return k
	}
	if len(b.m) >= maxBuckets {
		for k, v := range b.m {
			if v.lim.TokensAt(now) >= float64(b.burst) {
				delete(b.m, k)
			}
		}
	}
	k := &bucket{lim: rate.NewLimiter(rate.Every(b.every), b.burst), every: b.every}
	b.m[key] = k
	return k
}

// backOff doubles the refill interval of k if it is empty.
func (k *bucket) backOff(now time.Time) {
	if k.lim.TokensAt(now) >= 1 {
		return
	}
	k.every = min(2*k.every, maxBackoff)
	k.lim.SetLimitAt(now, rate.Every(k.every))
}

// wait is how long until k has a token again.
func (k *bucket) wait(now time.Time) time.Duration {
	missing := 1 - k.lim.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(missing * float64(k.every)))
}

// loginTicket is an attempt the limiter let through; Succeeded gives its
// tokens back, Failed backs off the buckets it emptied.
type loginTicket struct {
	l    *loginLimiter
	user *bucket // the device's bucket for a trusted device
	addr *bucket // nil for a trusted device: it took nothing from its address
}

// Failed records an evaluated failure: each of the attempt's buckets
// that is now empty refills at half its rate (up to maxBackoff).
func (t loginTicket) Failed(now time.Time) {
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	t.user.backOff(now)
	if t.addr != nil {
		t.addr.backOff(now)
	}
}

// Succeeded gives the attempt's tokens back: a successful login does not
// count against the limits.
func (t loginTicket) Succeeded(now time.Time) {
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	t.user.refund(now)
	if t.addr != nil {
		t.addr.refund(now)
	}
}

// refund adds a token to k (up to its burst). rate.Limiter cannot add
// tokens (a Reservation can only be cancelled before its time), so k
// gets a new limiter holding one token more than the old one (rounded
// down).
func (k *bucket) refund(now time.Time) {
	burst := k.lim.Burst()
	have := int(math.Floor(k.lim.TokensAt(now)))
	lim := rate.NewLimiter(rate.Every(k.every), burst)
	if take := burst - have - 1; take > 0 {
		lim.AllowN(now, take)
	}
	k.lim = lim
}

// reserve takes one token from the buckets of addr and of user, or,
// when device is not "" (the key of a valid device cookie of user), from
// the device's bucket alone: a trusted device is exempt from the address
// limit. It refuses the attempt when a bucket it would take from is
// empty: refused names the limit ("user", "device" or "address") and
// wait says when to try again. A refusal changes no bucket.
func (l *loginLimiter) reserve(user, device, addr string, now time.Time) (t loginTicket, refused string, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if device != "" {
		d := l.device.get(device, now)
		if d.lim.TokensAt(now) < 1 {
			return t, "device", d.wait(now)
		}
		d.lim.AllowN(now, 1)
		return loginTicket{l: l, user: d}, "", 0
	}
	u, a := l.user.get(strings.ToLower(user), now), l.addr.get(addr, now)
	switch {
	case u.lim.TokensAt(now) < 1:
		return t, "user", u.wait(now)
	case a.lim.TokensAt(now) < 1:
		return t, "address", a.wait(now)
	}
	u.lim.AllowN(now, 1)
	a.lim.AllowN(now, 1)
	return loginTicket{l: l, user: u, addr: a}, "", 0
}

// ipExtractor is how the server finds a client's address: the socket's
// peer, or, when the peer is one of the trusted proxies, the right-most
// untrusted address of X-Forwarded-For. Loopback, link-local and private
// peers are not trusted unless listed.
func ipExtractor(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		p = p.Masked()
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// hashWait is how long a login waits for a bcrypt slot (Config.MaxHashing).
const hashWait = 2 * time.Second
