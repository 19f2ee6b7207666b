package alert

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/cbdash/cbdash"
)

// Webhook URLs are secrets (a Slack webhook URL is all it takes to post
// to the channel) and their destinations are chosen by whoever may edit
// rules: the server calls them from inside the network. So a webhook URL
// is shown whole to admins only (ShowURL; MaskURL, scheme and host,
// for everyone else) and logged masked only; a destination in a loopback, private, link-local, unspecified
// or multicast range is refused unless DeliveryConfig.AllowPrivate (the
// serve flag --allow-private-webhooks), checked on every address the
// client dials, so DNS rebinding cannot get past it; and redirects are
// not followed.

// ErrPrivateDestination is wrapped by the refusal of a webhook whose
// destination is in a range reserved for internal use.
var ErrPrivateDestination = errors.New("webhook destination is in a loopback, private, link-local, unspecified or multicast range")

// attemptTimeout is how long one attempt of a webhook call may take, from
// dialling to the end of the answer's headers, by default.
const attemptTimeout = 5 * time.Second

// MaskURL returns raw as anyone but an admin may see it: its scheme and
// host (with the port) and nothing of what follows, since any part of it
// (user info, path, query, fragment) may be the secret.
// "https://hooks.slack.com/services/T000/B000/XXXX" and
// "https://hooks.example/T0KEN" are shown as "https://hooks.slack.com/…"
// and "https://hooks.example/…"; every URL with a host gets the "/…",
// whether or not something follows it. A URL without a host, or that does
// not parse, is "…". Every place a webhook URL leaves the server (the
// API, the Alerts page, the delivery log, the server's log, error
// messages) goes through MaskURL or ShowURL.
func MaskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "…"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// ShowURL is webhook URL raw as a caller sees it: whole when reveal (the
// caller is an admin), else MaskURL(raw).
func ShowURL(raw string, reveal bool) string {
	if reveal {
		return raw
	}
	return MaskURL(raw)
}

// legacyMaskURL is how MaskURL showed raw before issue 27 (item 6):
// the first path segment kept, the second's first character, "…" for the
// rest. A client that kept a URL shown that way and sends it back still
// keeps the stored URL (UpdateRule).
func legacyMaskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "…"
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://" + u.Host)
	segs := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	if segs[0] != "" {
		b.WriteString("/" + segs[0])
	}
	if len(segs) > 1 && segs[1] != "" {
		b.WriteString("/" + segs[1][:1] + "…")
	}
	if len(segs) > 2 {
		b.WriteString("/…")
	}
	if u.RawQuery != "" {
		b.WriteString("?…")
	}
	return b.String()
}

// isMasked reports whether webhook URL raw was sent back as it was shown
// to someone who is not an admin: raw is old masked (now or as it was
// shown before issue 27).
func isMasked(raw, old string) bool {
	return raw == MaskURL(old) || raw == legacyMaskURL(old)
}

// checkNotMasked refuses a webhook URL holding "…", the mark of a masked
// URL (a client that sends back another rule's masked URL, or one in
// another form): saved, it would overwrite the webhook with a URL that
// goes nowhere. A real URL has the character percent-encoded.
func checkNotMasked(raw string) error {
	if strings.Contains(raw, "…") {
		return fmt.Errorf("webhook_url %s is masked (\"…\"): send the whole URL, or, to keep the stored one, the URL as it was shown: %w",
			MaskURL(raw), cbdash.ErrInvalid)
	}
	return nil
}

// privateRanges are reserved ranges netip.Addr has no predicate for.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
	netip.MustParsePrefix("100.64.0.0/10"), // shared address space (carrier-grade NAT)
}

// checkAddr refuses an address in a range reserved for internal use.
func checkAddr(a netip.Addr) error {
	a = a.Unmap()
	bad := a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified()
	for _, p := range privateRanges {
		bad = bad || p.Contains(a)
	}
	if bad {
		return fmt.Errorf("%w: %s (refused; the serve flag --allow-private-webhooks allows it)", ErrPrivateDestination, a)
	}
	return nil
}

// dialControl is a net.Dialer Control that refuses private destinations:
// it sees the address actually dialled, after every DNS lookup.
func dialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is not an address", ErrPrivateDestination, address)
	}
	return checkAddr(ap.Addr())
}

// newClient returns the webhook client: no redirects followed, an
// attempt bounded by attemptTimeout, and unless allowPrivate every
// connection to a private destination refused.
func newClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: attemptTimeout}
	if !allowPrivate {
		d.Control = dialControl
	}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the check
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   attemptTimeout,
		ResponseHeaderTimeout: attemptTimeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       time.Minute,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       attemptTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CheckDestination checks, when a rule is saved, that raw's host is not
// in a private range (unless allowPrivate): a literal address, or every
// address the host resolves to now. A host that does not resolve now is
// accepted: each delivery checks the addresses it dials. Errors wrap
// cbdash.ErrInvalid (and ErrPrivateDestination), naming webhook_url but
// never its secret part.
func CheckDestination(ctx context.Context, raw string, allowPrivate bool) error {
	if allowPrivate {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return fmt.Errorf("webhook_url is not an http(s) URL: %w", cbdash.ErrInvalid)
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		addrs, _ = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	for _, a := range addrs {
		if err := checkAddr(a); err != nil {
			return fmt.Errorf("webhook_url %s: %w: %w", MaskURL(raw), cbdash.ErrInvalid, err)
		}
	}
	return nil
}

// callError is err of one webhook call without the URL (a *url.Error
// names it, and the delivery log and the server log must not).
func callError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("no answer within %s: %w", attemptTimeout, ue.Err)
		}
		return ue.Err
	}
	return err
}
