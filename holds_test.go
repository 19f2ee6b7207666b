package cbdash_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestSelectorMatches(t *testing.T) {
	eu := map[string]string{"region": "eu", "team": "pay"}
	us := map[string]string{"region": "us"}
	cases := []struct {
		name    string
		sel     cbdash.Selector
		inst    cbdash.InstanceRef
		breaker string
		want    bool
	}{
		{"one dependency of one service", cbdash.Selector{Service: "checkout", Breaker: "payments"},
			cbdash.InstanceRef{Service: "checkout", Instance: "c1"}, "payments", true},
		{"another breaker of that service", cbdash.Selector{Service: "checkout", Breaker: "payments"},
			cbdash.InstanceRef{Service: "checkout", Instance: "c1"}, "inventory", false},
		{"the same breaker name in another service", cbdash.Selector{Service: "checkout", Breaker: "payments"},
			cbdash.InstanceRef{Service: "catalog", Instance: "k1"}, "payments", false},
		{"every service by breaker name", cbdash.Selector{Service: "*", Breaker: "inventory"},
			cbdash.InstanceRef{Service: "catalog", Instance: "k1"}, "inventory", true},
		{"every service, but only that breaker name", cbdash.Selector{Service: "*", Breaker: "inventory"},
			cbdash.InstanceRef{Service: "catalog", Instance: "k1"}, "inventory-v2", false},
		{"a label the instance has", cbdash.Selector{Service: "*", Breaker: "db", Labels: map[string]string{"region": "eu"}},
			cbdash.InstanceRef{Service: "a", Instance: "a1", Labels: eu}, "db", true},
		{"a label with another value", cbdash.Selector{Service: "*", Breaker: "db", Labels: map[string]string{"region": "eu"}},
			cbdash.InstanceRef{Service: "a", Instance: "a1", Labels: us}, "db", false},
		{"a label the instance lacks", cbdash.Selector{Service: "*", Breaker: "db", Labels: map[string]string{"zone": "b"}},
			cbdash.InstanceRef{Service: "a", Instance: "a1", Labels: eu}, "db", false},
		{"a named instance", cbdash.Selector{Service: "a", Breaker: "db", Instances: []string{"a2", "a1"}},
			cbdash.InstanceRef{Service: "a", Instance: "a1"}, "db", true},
		{"an instance not named", cbdash.Selector{Service: "a", Breaker: "db", Instances: []string{"a2"}},
			cbdash.InstanceRef{Service: "a", Instance: "a1"}, "db", false},
		// ShareBucket: checkout-1 4.07, checkout-2 86.18.
		{"inside a share by its hash", cbdash.Selector{Service: "checkout", Breaker: "db", Share: 50},
			cbdash.InstanceRef{Service: "checkout", Instance: "checkout-1"}, "db", true},
		{"outside a share by its hash", cbdash.Selector{Service: "checkout", Breaker: "db", Share: 50},
			cbdash.InstanceRef{Service: "checkout", Instance: "checkout-2"}, "db", false},
		{"share 100 is everyone", cbdash.Selector{Service: "checkout", Breaker: "db", Share: 100},
			cbdash.InstanceRef{Service: "checkout", Instance: "checkout-2"}, "db", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.sel.Matches(c.inst, c.breaker); got != c.want {
				t.Fatalf("%s matches %s/%s %s: %v, want %v", c.sel, c.inst.Service, c.inst.Instance, c.breaker, got, c.want)
			}
		})
	}
}

func TestShareIsStableAndProportional(t *testing.T) {
	if a, b := cbdash.ShareBucket("checkout-7"), cbdash.ShareBucket("checkout-7"); a != b {
		t.Fatalf("the same id got buckets %v and %v", a, b)
	}
	in := 0
	const n = 10000
	for i := range n {
		if cbdash.InShare(fmt.Sprintf("host-%d", i), 30) {
			in++
		}
	}
	if got := float64(in) / n * 100; got < 28 || got > 32 {
		t.Fatalf("a 30%% share took %.1f%% of %d ids", got, n)
	}
}

func TestParseSelector(t *testing.T) {
	cases := []struct {
		in      string
		want    cbdash.Selector
		wantErr bool
	}{
		{"checkout/payments", cbdash.Selector{Service: "checkout", Breaker: "payments"}, false},
		{"*/inventory", cbdash.Selector{Service: "*", Breaker: "inventory"}, false},
		{"payments", cbdash.Selector{}, true},
		{"/payments", cbdash.Selector{}, true},
		{"a/b/c", cbdash.Selector{}, true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := cbdash.ParseSelector(c.in)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if err != nil && !errors.Is(err, cbdash.ErrInvalid) {
				t.Fatalf("err %v does not wrap ErrInvalid", err)
			}
			if got.Service != c.want.Service || got.Breaker != c.want.Breaker {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestHoldRequestValidate(t *testing.T) {
	ok := cbdash.HoldRequest{Selector: cbdash.Selector{Service: "a", Breaker: "b"}, Action: protocol.ActionForceOpen,
		TTL: time.Hour, Reason: "drill"}
	cases := []struct {
		name    string
		mod     func(*cbdash.HoldRequest)
		maxHold time.Duration
		want    string // substring of the error; "" = valid
	}{
		{"valid", func(*cbdash.HoldRequest) {}, 0, ""},
		{"at the limit", func(r *cbdash.HoldRequest) { r.TTL = 24 * time.Hour }, 0, ""},
		{"over the default limit", func(r *cbdash.HoldRequest) { r.TTL = 8760 * time.Hour }, 0, "maximum hold duration 24h0m0s"},
		{"over a configured limit", func(r *cbdash.HoldRequest) { r.TTL = 2 * time.Hour }, time.Hour, "maximum hold duration 1h0m0s"},
		{"no ttl", func(r *cbdash.HoldRequest) { r.TTL = 0 }, 0, "ttl is required"},
		{"release is not a hold", func(r *cbdash.HoldRequest) { r.Action = protocol.ActionRelease }, 0, "action"},
		{"no reason", func(r *cbdash.HoldRequest) { r.Reason = " " }, 0, "reason is required"},
		{"no breaker", func(r *cbdash.HoldRequest) { r.Selector.Breaker = "" }, 0, "breaker is required"},
		{"share over 100", func(r *cbdash.HoldRequest) { r.Selector.Share = 150 }, 0, "share"},
		{"a zero width space in the breaker", func(r *cbdash.HoldRequest) { r.Selector.Breaker = "pay\u200bments" }, 0,
			"breaker contains the invisible format character U+200B at byte 3"},
		{"a word joiner in the service", func(r *cbdash.HoldRequest) { r.Selector.Service = "a\u2060" }, 0,
			"service contains the invisible format character U+2060 at byte 1"},
		{"a right-to-left mark in an instance", func(r *cbdash.HoldRequest) { r.Selector.Instances = []string{"i-1\u200f"} }, 0,
			"instance contains the invisible format character U+200F at byte 3"},
		{"a BOM in a label value", func(r *cbdash.HoldRequest) { r.Selector.Labels = map[string]string{"region": "\ufeffeu"} }, 0,
			`label "region" contains the invisible format character U+FEFF at byte 0`},
		{"every service", func(r *cbdash.HoldRequest) { r.Selector.Service = cbdash.AnyService }, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			c.mod(&r)
			err := r.Validate(c.maxHold)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, cbdash.ErrInvalid)):
				t.Fatalf("Validate = %v, want an ErrInvalid naming %q", err, c.want)
			}
		})
	}
}

func TestGoverningHoldIsTheMostRecentLiveOne(t *testing.T) {
	t0 := breakertest.Epoch()
	hold := func(id string, created time.Duration, sel cbdash.Selector, action string) cbdash.HoldRecord {
		return cbdash.HoldRecord{ID: id, HoldRequest: cbdash.HoldRequest{Selector: sel, Action: action},
			CreatedAt: t0.Add(created), Until: t0.Add(created + time.Hour)}
	}
	fleet := hold("h1", 0, cbdash.Selector{Service: "*", Breaker: "inventory"}, protocol.ActionForceOpen)
	eu := hold("h2", time.Minute, cbdash.Selector{Service: "checkout", Breaker: "inventory",
		Labels: map[string]string{"region": "eu"}}, protocol.ActionForceClosed)
	released := hold("h3", 2*time.Minute, cbdash.Selector{Service: "*", Breaker: "inventory"}, protocol.ActionForceClosed)
	released.ReleasedAt = t0.Add(3 * time.Minute)
	holds := []cbdash.HoldRecord{released, eu, fleet}
	euInst := cbdash.InstanceRef{Service: "checkout", Instance: "c1", Labels: map[string]string{"region": "eu"}}
	usInst := cbdash.InstanceRef{Service: "checkout", Instance: "c2", Labels: map[string]string{"region": "us"}}
	cases := []struct {
		name string
		inst cbdash.InstanceRef
		br   string
		at   time.Duration
		want string // "" = none
	}{
		{"before any hold", euInst, "inventory", -time.Second, ""},
		{"only the fleet hold exists yet", euInst, "inventory", 30 * time.Second, "h1"},
		{"the newer narrow hold wins where it matches", euInst, "inventory", 90 * time.Second, "h2"},
		{"the fleet hold where the narrow one does not match", usInst, "inventory", 90 * time.Second, "h1"},
		{"a newer hold wins until it is released", usInst, "inventory", 150 * time.Second, "h3"},
		{"after its release the previous one governs again", usInst, "inventory", 4 * time.Minute, "h1"},
		{"another breaker is not held", usInst, "payments", 4 * time.Minute, ""},
		{"after the fleet hold expired the narrow one is left", euInst, "inventory", 60*time.Minute + 30*time.Second, "h2"},
		{"after every expiry, none", euInst, "inventory", 2 * time.Hour, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, ok := cbdash.Governing(holds, c.inst, c.br, t0.Add(c.at))
			if got := map[bool]string{true: h.ID}[ok]; got != c.want {
				t.Fatalf("governing hold = %q, want %q", got, c.want)
			}
		})
	}
}

func TestHoldOfCommand(t *testing.T) {
	for in, want := range map[string]string{"h0a1b-7f": "h0a1b", "0a1b2c": "", "h-x": "", "habc": ""} {
		got, ok := cbdash.HoldOfCommand(in)
		if got != want || ok != (want != "") {
			t.Errorf("HoldOfCommand(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
