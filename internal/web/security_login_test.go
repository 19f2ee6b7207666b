package web_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/web"
)

// loginFrom posts a login for user with a forged X-Forwarded-For (none
// when xff is "") and returns the status.
func (c *client) loginFrom(user, password, xff string) int {
	form := url.Values{"user": {user}, "password": {password}, "_csrf": {c.csrf()}}
	req, _ := http.NewRequest(http.MethodPost, c.h.url+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
		req.Header.Set("X-Real-IP", xff)
	}
	return c.do(req).status
}

func TestSecurityLoginLimiterCannotBeBypassed(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	reg := prometheus.NewRegistry()
	h := newHarness(t, web.Config{LoginBurst: 3, MaxHashing: 3, Clock: clk, Registerer: reg}) // the 3 evaluated attempts never wait for bcrypt

	t.Run("8 tries with 8 forged X-Forwarded-For are limited like 8 plain ones", func(t *testing.T) {
		c := h.client()
		var got []int
		for i := range 8 {
			got = append(got, c.loginFrom("otto", "guess", fmt.Sprintf("198.51.100.%d", i+1)))
		}
		want := []int{401, 401, 401, 429, 429, 429, 429, 429}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("statuses %v, want %v", got, want)
		}
		if s := c.loginFrom("otto", h.users["otto"], "203.0.113.9"); s != http.StatusTooManyRequests {
			t.Errorf("the right password from another forged address while the user is locked = %d, want 429", s)
		}
	})

	t.Run("evaluated failures back off: waiting one interval is not enough", func(t *testing.T) {
		c := h.client()
		clk.Advance(12 * time.Second)
		if s := c.loginFrom("otto", h.users["otto"], ""); s != http.StatusTooManyRequests {
			t.Errorf("one interval after 6 refusals = %d, want 429", s)
		}
		clk.Advance(maxWait)
		if s := c.loginFrom("otto", h.users["otto"], ""); s != http.StatusSeeOther {
			t.Errorf("after the back-off = %d, want 303", s)
		}
	})

	t.Run("40 parallel attempts: only the burst is evaluated", func(t *testing.T) {
		clk.Advance(maxWait)
		before := counter(t, reg, "cbdash_logins_total", "failed")
		c := h.client()
		c.csrf()
		var wg sync.WaitGroup
		statuses := make(chan int, 40)
		for range 40 {
			wg.Go(func() { statuses <- c.loginFrom("vera", "guess", "") })
		}
		wg.Wait()
		close(statuses)
		n := map[int]int{}
		for s := range statuses {
			n[s]++
		}
		if n[401] != 3 || n[429] != 37 {
			t.Errorf("statuses %v, want 3 x 401 and 37 x 429", n)
		}
		if d := counter(t, reg, "cbdash_logins_total", "failed") - before; d != 3 {
			t.Errorf("%v passwords were checked, want 3", d)
		}
		if r := counter(t, reg, "cbdash_login_refused_total", "user"); r < 37 {
			t.Errorf("cbdash_login_refused_total{limit=user} = %v, want at least 37", r)
		}
	})

	t.Run("one address cannot try many users", func(t *testing.T) {
		clk.Advance(maxWait)
		c := h.client()
		var refused int
		for i := range 13 {
			if c.loginFrom(fmt.Sprintf("nobody-%d", i), "guess", fmt.Sprintf("198.51.100.%d", i)) == http.StatusTooManyRequests {
				refused++
			}
		}
		if refused != 1 {
			t.Errorf("%d of 13 tries for 13 users from one address were refused, want the 13th (burst 12)", refused)
		}
	})
}

func TestSecurityTrustedProxyAddressesAreBelieved(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual() // does not move: no bucket refills during the test
	h := newHarness(t, web.Config{LoginBurst: 1, Clock: clk, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	c := h.client()
	for i := range 6 {
		if s := c.loginFrom(fmt.Sprintf("nobody-%d", i), "guess", fmt.Sprintf("198.51.100.%d", i)); s != http.StatusUnauthorized {
			t.Errorf("try %d from its own address behind the trusted proxy = %d, want 401", i, s)
		}
	}
	for i := range 5 {
		s := c.loginFrom(fmt.Sprintf("other-%d", i), "guess", "198.51.100.200")
		if want := map[bool]int{true: 401, false: 429}[i < 4]; s != want {
			t.Errorf("try %d from one address behind the proxy = %d, want %d", i, s, want)
		}
	}
}

// maxWait is more than the longest back-off.
const maxWait = 16 * time.Minute

// counter reads the value of counter name with a label of value label
// (0 when it has none yet).
func counter(t *testing.T, g prometheus.Gatherer, name, label string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestSecurityLoginRedirectStaysLocal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{})
	for _, next := range []string{"/\t/evil.example", "/\n/evil.example", "/\\evil.example", "/a\\b", "//evil.example", "https://evil.example/", "/\x7f/evil.example"} {
		res := h.client().postForm("/login", url.Values{"user": {"vera"}, "password": {h.users["vera"]}, "next": {next}})
		if res.status != http.StatusSeeOther || res.header.Get("Location") != "/" {
			t.Errorf("next=%q: %d to %q, want a redirect to /", next, res.status, res.header.Get("Location"))
		}
	}
	res := h.client().postForm("/login", url.Values{"user": {"vera"}, "password": {h.users["vera"]}, "next": {"/timeline?range=1h"}})
	if res.header.Get("Location") != "/timeline?range=1h" {
		t.Errorf("a local next went to %q", res.header.Get("Location"))
	}
}

// deviceCookieOf returns the client's device cookie for /login ("" when
// it has none).
func (c *client) deviceCookieOf() string {
	u, _ := url.Parse(c.h.url + "/login")
	for _, ck := range c.hc.Jar.Cookies(u) {
		if ck.Name == "cbdash_device" {
			return ck.Value
		}
	}
	return ""
}

// withDevice is a new client (no session) that presents device cookie value.
func (h *harness) withDevice(value string) *client {
	c := h.client()
	u, _ := url.Parse(h.url + "/login")
	c.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "cbdash_device", Value: value, Path: "/login"}})
	return c
}

func TestSecurityLoginAttackerCannotLockOutAProvenDevice(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual() // does not move unless told: no bucket refills by itself
	reg := prometheus.NewRegistry()
	h := newHarness(t, web.Config{LoginBurst: 5, MaxHashing: 5, Clock: clk, Registerer: reg})

	victim := h.login("otto")
	device := victim.deviceCookieOf()
	if device == "" {
		t.Fatal("a successful login set no cbdash_device cookie")
	}
	other := h.login("vera").deviceCookieOf()

	// The attacker's wrong tries, from a forged X-Forwarded-For each and
	// from fresh clients, lock otto's shared bucket.
	var got []int
	for i := range 8 {
		got = append(got, h.client().loginFrom("otto", "guess", fmt.Sprintf("198.51.100.%d", i+1)))
	}
	if want := []int{401, 401, 401, 401, 401, 429, 429, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the attacker's statuses %v, want %v", got, want)
	}

	t.Run("the victim with a device cookie still logs in", func(t *testing.T) {
		c := h.withDevice(device)
		if s := c.loginFrom("otto", h.users["otto"], ""); s != http.StatusSeeOther {
			t.Errorf("otto's right password with his device cookie = %d, want 303", s)
		}
	})
	t.Run("an attacker without a cookie is still limited", func(t *testing.T) {
		if s := h.client().loginFrom("otto", h.users["otto"], ""); s != http.StatusTooManyRequests {
			t.Errorf("the right password without a device cookie while otto is locked = %d, want 429", s)
		}
	})
	t.Run("forged and other users' cookies are ignored", func(t *testing.T) {
		parts := strings.Split(device, ".")
		forged := []string{
			"x", "", parts[0] + "." + parts[1] + ".AAAA",
			parts[0] + ".1" + parts[1] + "." + parts[2], // issued-at changed under the same MAC
			other, // vera's valid cookie used for otto
		}
		for _, v := range forged {
			if s := h.withDevice(v).loginFrom("otto", h.users["otto"], ""); s != http.StatusTooManyRequests {
				t.Errorf("cookie %q while otto is locked = %d, want 429 (ignored)", v, s)
			}
		}
		// otto's own cookie past its 30 days: TestDeviceCookieIsBoundToUserKeyAndTime
		// (moving the virtual clock a month fires every ticker of the stack).
	})
	t.Run("a device's own failures are limited per device", func(t *testing.T) {
		c := h.client()
		if s := c.loginFrom("ada", h.users["ada"], ""); s != http.StatusSeeOther {
			t.Fatalf("ada's login = %d", s)
		}
		var got []int
		for range 6 {
			got = append(got, c.loginFrom("ada", "guess", ""))
		}
		if want := []int{401, 401, 401, 401, 401, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("wrong tries with ada's device cookie: %v, want %v", got, want)
		}
		if r := counter(t, reg, "cbdash_login_refused_total", "device"); r != 1 {
			t.Errorf("cbdash_login_refused_total{limit=device} = %v, want 1", r)
		}
		// The device's failures did not touch ada's shared bucket.
		if s := h.client().loginFrom("ada", h.users["ada"], ""); s != http.StatusSeeOther {
			t.Errorf("ada from another client = %d, want 303", s)
		}
	})
}

func TestSecurityLoginRefusalsDoNotExtendTheLock(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual()
	h := newHarness(t, web.Config{LoginBurst: 2, MaxHashing: 2, LoginEvery: 10 * time.Second, Clock: clk})
	c := h.client()
	for range 2 { // the 2nd failure empties the bucket: refill every 20 s
		if s := c.loginFrom("otto", "guess", ""); s != http.StatusUnauthorized {
			t.Fatalf("a first wrong try = %d", s)
		}
	}
	for range 100 {
		if s := c.loginFrom("otto", "guess", ""); s != http.StatusTooManyRequests {
			t.Fatalf("a try while locked = %d, want 429", s)
		}
	}
	clk.Advance(20 * time.Second)
	if s := c.loginFrom("otto", h.users["otto"], ""); s != http.StatusSeeOther {
		t.Errorf("after one backed-off interval (100 refusals in it) = %d, want 303", s)
	}
}

// Everyone behind one address (an office NAT, a proxy not named in
// --trusted-proxy) shares its bucket; a client with a valid device cookie
// of its user does not (issue 27, item 5).
func TestSecurityLoginAddressLockSparesAProvenDevice(t *testing.T) {
	t.Parallel()
	clk := clocktest.Virtual() // does not move: no bucket refills during the test
	reg := prometheus.NewRegistry()
	h := newHarness(t, web.Config{LoginBurst: 5, MaxHashing: 5, Clock: clk, Registerer: reg})

	victim := h.login("otto").deviceCookieOf()
	other := h.login("vera").deviceCookieOf()
	if victim == "" || other == "" {
		t.Fatal("a successful login set no cbdash_device cookie")
	}

	// The attacker shares the victim's address (loopback, no trusted
	// proxy: X-Forwarded-For is not believed) and fails for 21 names,
	// none of them otto's, so only the address's bucket (4 x 5) empties.
	var refused int
	for i := range 21 {
		if s := h.client().loginFrom(fmt.Sprintf("nobody-%d", i), "guess", ""); s == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused != 1 || counter(t, reg, "cbdash_login_refused_total", "address") != 1 {
		t.Fatalf("%d of 21 tries from one address refused (address refusals %v), want the 21st",
			refused, counter(t, reg, "cbdash_login_refused_total", "address"))
	}

	t.Run("the victim with a device cookie logs in from the locked address", func(t *testing.T) {
		if s := h.withDevice(victim).loginFrom("otto", h.users["otto"], ""); s != http.StatusSeeOther {
			t.Errorf("otto's right password with his device cookie = %d, want 303", s)
		}
	})
	t.Run("without a device cookie the address is still locked", func(t *testing.T) {
		if s := h.client().loginFrom("otto", h.users["otto"], ""); s != http.StatusTooManyRequests {
			t.Errorf("otto's right password without a device cookie = %d, want 429", s)
		}
		parts := strings.Split(victim, ".")
		for _, v := range []string{other, parts[0] + "." + parts[1] + ".AAAA"} { // vera's cookie for otto, a forged MAC
			if s := h.withDevice(v).loginFrom("otto", h.users["otto"], ""); s != http.StatusTooManyRequests {
				t.Errorf("cookie %q for otto from the locked address = %d, want 429 (ignored)", v, s)
			}
		}
		if s := h.withDevice(victim).loginFrom("ada", h.users["ada"], ""); s != http.StatusTooManyRequests {
			t.Errorf("otto's cookie with ada's name and password = %d, want 429 (ignored)", s)
		}
	})
	t.Run("the device's own bucket limits wrong passwords given with it", func(t *testing.T) {
		before := counter(t, reg, "cbdash_login_refused_total", "device")
		c := h.withDevice(victim)
		var got []int
		for range 7 {
			got = append(got, c.loginFrom("otto", "guess", ""))
		}
		if want := []int{401, 401, 401, 401, 401, 429, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("wrong tries with otto's device cookie: %v, want %v", got, want)
		}
		if s := c.loginFrom("otto", h.users["otto"], ""); s != http.StatusTooManyRequests {
			t.Errorf("the right password with the emptied device cookie = %d, want 429", s)
		}
		if d := counter(t, reg, "cbdash_login_refused_total", "device") - before; d != 3 {
			t.Errorf("cbdash_login_refused_total{limit=device} rose by %v, want 3", d)
		}
	})
}
