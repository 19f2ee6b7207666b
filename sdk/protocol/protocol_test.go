package protocol_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// now is the server's time in these tests, Unix ms: the test epoch, which
// CBDASH_TEST_EPOCH moves (breakertest.Epoch).
var now = breakertest.Epoch().UnixMilli()

func validHello() protocol.Hello {
	return protocol.Hello{
		Type: protocol.TypeHello, Protocol: protocol.Version,
		Service: "checkout", Instance: "checkout-7f9c-1", SDKVersion: "0.1.0",
		Labels:    map[string]string{"region": "eu-west-1"},
		StartedAt: now - 60_000,
		Breakers: []protocol.BreakerConfig{{
			Name: "payments", WindowKind: "count", WindowSize: 100,
			FailureRateThreshold: 50, MinimumCalls: 20, OpenDurationMillis: 5000,
			HalfOpenMaxCalls: 3, HalfOpenSuccessThreshold: 3,
		}},
	}
}

func validBatch() protocol.Batch {
	return protocol.Batch{
		Type: protocol.TypeBatch, Seq: 1, SentAt: now,
		Transitions: []protocol.Transition{{
			Breaker: "payments", From: protocol.StateClosed, To: protocol.StateOpen, At: now - 10,
			Generation: 2, Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 55, Threshold: 50},
			OpenMillis: 5000,
		}},
		Windows: []protocol.Window{{
			Breaker: "payments", Start: now - 1000, Millis: 1000, State: protocol.StateOpen,
			Counts:  protocol.Counts{Admitted: 10, Successes: 4, Failures: 6, Errors: 5, Timeouts: 1},
			Latency: make([]int64, protocol.NumLatencyBuckets),
			Headroom: protocol.Headroom{Calls: 40, Failures: 22, MinimumCalls: 20, FailureRate: 55,
				FailureRateThreshold: 50},
		}},
		CommandResults: []protocol.CommandResult{{ID: "c1", Breaker: "payments", OK: true,
			State: protocol.StateForcedOpen, At: now}},
	}
}

func TestHelloValidate(t *testing.T) {
	long := strings.Repeat("x", protocol.MaxNameLen+1)
	tests := []struct {
		name   string
		mutate func(*protocol.Hello)
		want   string // substring of the error; "" = valid
	}{
		{"accepts a complete hello", func(*protocol.Hello) {}, ""},
		{"refuses another protocol version", func(h *protocol.Hello) { h.Protocol = 2 }, "protocol 2"},
		{"refuses a missing service", func(h *protocol.Hello) { h.Service = " " }, "service is required"},
		{"refuses a missing instance", func(h *protocol.Hello) { h.Instance = "" }, "instance is required"},
		{"refuses a slash in the service name", func(h *protocol.Hello) { h.Service = "shop/checkout" }, "contains a slash"},
		{"refuses a long instance", func(h *protocol.Hello) { h.Instance = long }, "instance is longer"},
		{"refuses an empty label key", func(h *protocol.Hello) { h.Labels[""] = "x" }, "label key"},
		{"refuses a long label value", func(h *protocol.Hello) { h.Labels["team"] = long }, `label "team"`},
		{"refuses a breaker declared twice", func(h *protocol.Hello) { h.Breakers = append(h.Breakers, h.Breakers[0]) }, "declared twice"},
		{"refuses a threshold above 100", func(h *protocol.Hello) { h.Breakers[0].FailureRateThreshold = 101 }, "breakers[0].failure_rate_threshold"},
		{"refuses a blank label value", func(h *protocol.Hello) { h.Labels["team"] = " " }, `label "team" has a blank value`},
		{"refuses an unknown window kind", func(h *protocol.Hello) { h.Breakers[0].WindowKind = "sliding" }, `breakers[0].window_kind "sliding" is not "count" or "time"`},
		{"refuses a negative window size", func(h *protocol.Hello) { h.Breakers[0].WindowSize = -5 }, "breakers[0].window_size is negative (-5)"},
		{"refuses a negative minimum", func(h *protocol.Hello) { h.Breakers[0].MinimumCalls = -1 }, "breakers[0].minimum_calls is negative"},
		{"refuses a NaN backoff", func(h *protocol.Hello) { h.Breakers[0].OpenBackoffMultiplier = math.NaN() }, "open_backoff_multiplier must be a finite number"},
		{"refuses a missing started_at", func(h *protocol.Hello) { h.StartedAt = 0 }, "started_at is required"},
		{"refuses NUL in a breaker name", func(h *protocol.Hello) { h.Breakers[0].Name = "pay\x00ments" }, "breakers[0].name contains the control character U+0000"},
		{"refuses a bidi override in a breaker name", func(h *protocol.Hello) { h.Breakers[0].Name = "pay\u202egnp.exe" }, "breakers[0].name contains the bidirectional control U+202E"},
		{"refuses an isolate in a label value", func(h *protocol.Hello) { h.Labels["team"] = "a\u2066b" }, "U+2066"},
		{"refuses invalid UTF-8 in the instance", func(h *protocol.Hello) { h.Instance = "a\xffb" }, "instance is not valid UTF-8"},
		{"refuses U+FFFD in the service", func(h *protocol.Hello) { h.Service = "a\ufffdb" }, "service contains U+FFFD"},
		{"refuses too many breakers", func(h *protocol.Hello) {
			h.Breakers = make([]protocol.BreakerConfig, protocol.MaxBreakersPerHello+1)
		}, "breakers (at most"},
		{"accepts a foreign library's settings", func(h *protocol.Hello) {
			h.Breakers[0].Library = "sony/gobreaker v2"
			h.Breakers[0].Settings = protocol.NewSettings(map[string]string{"MaxRequests": "1", "Timeout": "30s"})
			h.Breakers[0].HoldsUnsupported = true
		}, ""},
		{"refuses an empty setting name", func(h *protocol.Hello) {
			h.Breakers[0].Settings = protocol.NewSettings(map[string]string{"": "1"})
		}, "breakers[0].settings key is required"},
		{"refuses a long setting value", func(h *protocol.Hello) {
			h.Breakers[0].Settings = protocol.NewSettings(map[string]string{"ReadyToTrip": long})
		}, `breakers[0].settings["ReadyToTrip"] is longer`},
		{"refuses too many settings", func(h *protocol.Hello) {
			m := map[string]string{}
			for i := range protocol.MaxSettings + 1 {
				m[strings.Repeat("k", i+1)] = "v"
			}
			h.Breakers[0].Settings = protocol.NewSettings(m)
		}, "at most 64"},
		{"refuses a long library name", func(h *protocol.Hello) { h.Breakers[0].Library = long }, "breakers[0].library"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := validHello()
			tt.mutate(&h)
			checkErr(t, h.Validate(), tt.want)
		})
	}
}

func TestBatchValidate(t *testing.T) {
	hello := validHello()
	tests := []struct {
		name   string
		mutate func(*protocol.Batch)
		want   string
	}{
		{"accepts a complete batch", func(*protocol.Batch) {}, ""},
		{"refuses seq 0", func(b *protocol.Batch) { b.Seq = 0 }, "seq is required"},
		{"refuses a time too far ahead of sent_at and the server", func(b *protocol.Batch) { b.Windows[0].Start = now + protocol.MaxFutureSkewMillis + 1 }, "windows[0].start is"},
		{"accepts an agent clock ahead: times judged against its sent_at", func(b *protocol.Batch) {
			b.SentAt = now + 3_600_000
			b.Windows[0].Start = now + 3_599_000
			b.Transitions[0].At = now + 3_599_990
		}, ""},
		{"refuses a sent_at more than a day ahead", func(b *protocol.Batch) { b.SentAt = now + protocol.MaxStartedAtAheadMillis + 1 }, "sent_at is"},
		{"refuses a window dated 1970", func(b *protocol.Batch) { b.Windows[0].Start = 1000 }, "windows[0] ended at"},
		{"refuses a window that ended before started_at by more than the slack", func(b *protocol.Batch) {
			b.Windows[0].Start = hello.StartedAt - protocol.MaxFutureSkewMillis - 1 - b.Windows[0].Millis
		}, "before the agent's started_at"},
		{"accepts a window that ended a little before started_at (a clock stepped back)", func(b *protocol.Batch) {
			b.Windows[0].Start = hello.StartedAt - protocol.MaxFutureSkewMillis - b.Windows[0].Millis
		}, ""},
		{"accepts a window that began long before started_at and ended after it", func(b *protocol.Batch) {
			b.Windows[0].Start, b.Windows[0].Millis = hello.StartedAt-protocol.MaxWindowMillis+1000, protocol.MaxWindowMillis
		}, ""},
		{"refuses a window ahead of both sent_at and the server", func(b *protocol.Batch) {
			b.SentAt = now - 60_000 // an agent behind: its times are judged against the server's clock
			b.Windows[0].Start = now + protocol.MaxFutureSkewMillis + 1
		}, "windows[0].start is"},
		{"refuses seq above 2^53-1", func(b *protocol.Batch) { b.Seq = 1 << 63 }, "seq 9223372036854775808 is above"},
		{"refuses a count above MaxCount", func(b *protocol.Batch) { b.Windows[0].Counts.Admitted = 9e18 }, "counts.admitted is 9000000000000000000, above"},
		{"refuses a huge latency sum", func(b *protocol.Batch) { b.Windows[0].LatencySumMs = 1e308 }, "windows[0].latency_sum_ms must be a finite number"},
		{"refuses a huge bucket", func(b *protocol.Batch) { b.Windows[0].Latency[2] = 1 << 50 }, "latency[2] is"},
		{"refuses a huge in_flight", func(b *protocol.Batch) { b.Windows[0].InFlight = 1 << 41 }, "in_flight is"},
		{"accepts a cluster's hosts", func(b *protocol.Batch) { b.Windows[0].Hosts = &protocol.Hosts{Total: 2, Open: 1} }, ""},
		{"refuses a cluster of no host", func(b *protocol.Batch) { b.Windows[0].Hosts = &protocol.Hosts{} }, "windows[0].hosts must have total within 1..100000"},
		{"refuses more hosts open than there are", func(b *protocol.Batch) { b.Windows[0].Hosts = &protocol.Hosts{Total: 2, Open: 3} }, "open within 0..total"},
		{"refuses negative dropped counts", func(b *protocol.Batch) { b.Dropped = &protocol.Dropped{Windows: -1} }, "dropped.windows is negative"},
		{"accepts lost spans", func(b *protocol.Batch) {
			b.Dropped = &protocol.Dropped{Windows: 2, Calls: 9, Lost: []protocol.LostSpan{{Breaker: b.Windows[0].Breaker, Start: now - 5000, End: now - 3000, Calls: 9}}}
		}, ""},
		{"refuses negative dropped calls", func(b *protocol.Batch) { b.Dropped = &protocol.Dropped{Calls: -1} }, "dropped.calls is negative"},
		{"refuses a lost span of an undeclared breaker", func(b *protocol.Batch) {
			b.Dropped = &protocol.Dropped{Lost: []protocol.LostSpan{{Breaker: "ledger", Start: now - 5000, End: now, Calls: 1}}}
		}, "dropped.lost[0].breaker \"ledger\" was not declared"},
		{"refuses a lost span ending before it starts", func(b *protocol.Batch) {
			b.Dropped = &protocol.Dropped{Lost: []protocol.LostSpan{{Breaker: b.Windows[0].Breaker, Start: now, End: now, Calls: 1}}}
		}, "dropped.lost[0].end must be after start"},
		{"refuses a lost span longer than a day", func(b *protocol.Batch) {
			b.Dropped = &protocol.Dropped{Lost: []protocol.LostSpan{{Breaker: b.Windows[0].Breaker, Start: now - protocol.MaxLostSpanMillis - 1, End: now}}}
		}, "dropped.lost[0].end must be after start by at most"},
		{"refuses a lost span in the future", func(b *protocol.Batch) {
			b.Dropped = &protocol.Dropped{Lost: []protocol.LostSpan{{Breaker: b.Windows[0].Breaker, Start: now, End: now + protocol.MaxFutureSkewMillis + 1}}}
		}, "dropped.lost[0].end is"},
		{"refuses negative lost calls", func(b *protocol.Batch) {
			b.Dropped = &protocol.Dropped{Lost: []protocol.LostSpan{{Breaker: b.Windows[0].Breaker, Start: now - 1000, End: now, Calls: -1}}}
		}, "dropped.lost[0].calls must be within"},
		{"refuses too many lost spans", func(b *protocol.Batch) {
			b.Dropped = &protocol.Dropped{Lost: make([]protocol.LostSpan, protocol.MaxLostSpans+1)}
		}, "dropped.lost has 1001 spans"},
		{"refuses a bidi override in a cause reason", func(b *protocol.Batch) { b.Transitions[0].Cause.Reason = "pay\u202egnp.exe" }, "cause.reason contains the bidirectional control U+202E"},
		{"refuses NUL in a command result error", func(b *protocol.Batch) { b.CommandResults[0].Error = "a\x00b" }, "command_results[0].error contains the control character U+0000"},
		{"refuses a negative window count in a cause", func(b *protocol.Batch) { b.Transitions[0].Cause.WindowCalls = -1 }, "cause.window_calls is negative"},
		{"refuses an undeclared breaker", func(b *protocol.Batch) { b.Windows[0].Breaker = "ledger" }, "not declared in hello"},
		{"refuses an unknown state", func(b *protocol.Batch) { b.Transitions[0].To = "ajar" }, "unknown state"},
		{"refuses a transition without cause", func(b *protocol.Batch) { b.Transitions[0].Cause.Kind = "" }, "cause.kind is required"},
		{"refuses a negative open duration", func(b *protocol.Batch) { b.Transitions[0].OpenMillis = -1 }, "open_ms"},
		{"refuses a zero-length window", func(b *protocol.Batch) { b.Windows[0].Millis = 0 }, "duration_ms"},
		{"refuses a window longer than an hour", func(b *protocol.Batch) { b.Windows[0].Millis = protocol.MaxWindowMillis + 1 }, "duration_ms"},
		{"refuses failures that are not errors+timeouts+panics", func(b *protocol.Batch) { b.Windows[0].Counts.Failures = 7 }, "counts.failures"},
		{"refuses a negative count", func(b *protocol.Batch) { b.Windows[0].Counts.Slow = -1 }, "counts.slow"},
		{"accepts a misuse count", func(b *protocol.Batch) { b.Windows[0].Counts.Misuse = 2 }, ""},
		{"refuses a negative misuse count", func(b *protocol.Batch) { b.Windows[0].Counts.Misuse = -1 }, "counts.misuse"},
		{"accepts ramp rejections", func(b *protocol.Batch) { b.Windows[0].Counts.RejectedRamp = 2 }, ""},
		{"refuses negative ramp rejections", func(b *protocol.Batch) { b.Windows[0].Counts.RejectedRamp = -1 }, "counts.rejected_ramp"},
		{"refuses a histogram of the wrong length", func(b *protocol.Batch) { b.Windows[0].Latency = []int64{1} }, "buckets"},
		{"refuses a negative bucket", func(b *protocol.Batch) { b.Windows[0].Latency[3] = -1 }, "latency[3]"},
		{"refuses a rate above 100", func(b *protocol.Batch) { b.Windows[0].Headroom.FailureRate = 100.5 }, "headroom.failure_rate"},
		{"refuses a command result without id", func(b *protocol.Batch) { b.CommandResults[0].ID = "" }, "command_results[0].id"},
		{"refuses too many windows", func(b *protocol.Batch) {
			b.Windows = make([]protocol.Window, protocol.MaxWindows+1)
		}, "windows (at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := validBatch()
			tt.mutate(&b)
			checkErr(t, b.Validate(&hello, now), tt.want)
		})
	}
}

func TestCommandValidate(t *testing.T) {
	tests := []struct {
		name string
		cmd  protocol.Command
		want string
	}{
		{"accepts force_open with a ttl", protocol.Command{ID: "1", Breaker: "b", Action: protocol.ActionForceOpen, TTLMillis: 1000}, ""},
		{"refuses a missing id", protocol.Command{Breaker: "b", Action: protocol.ActionReset}, "id is required"},
		{"refuses an unknown action", protocol.Command{ID: "1", Breaker: "b", Action: "explode"}, `unknown action "explode"`},
		{"refuses a negative ttl", protocol.Command{ID: "1", Breaker: "b", Action: protocol.ActionForceOpen, TTLMillis: -1}, "ttl_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErr(t, tt.cmd.Validate(), tt.want) })
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	if !errors.Is(err, protocol.ErrInvalid) {
		t.Errorf("error %v does not wrap ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
}

// decodeAndValidate decodes one wire message the way a collector or an
// agent does and validates it. It returns the message's type.
func decodeAndValidate(data []byte) (string, any, error) {
	var env protocol.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return "", nil, err
	}
	hello := validHello()
	switch env.Type {
	case protocol.TypeHello:
		var h protocol.Hello
		if err := json.Unmarshal(data, &h); err != nil {
			return env.Type, nil, err
		}
		return env.Type, &h, h.Validate()
	case protocol.TypeBatch:
		var b protocol.Batch
		if err := json.Unmarshal(data, &b); err != nil {
			return env.Type, nil, err
		}
		return env.Type, &b, b.Validate(&hello, now)
	case protocol.TypeCommand:
		var c protocol.Command
		if err := json.Unmarshal(data, &c); err != nil {
			return env.Type, nil, err
		}
		return env.Type, &c, c.Validate()
	}
	return env.Type, nil, nil
}

// FuzzDecodeValidate feeds arbitrary frames through decoding and
// validation: neither may panic, and a message that validates must still
// validate after a JSON round trip (what the collector stores is what it
// accepted).
func FuzzDecodeValidate(f *testing.F) {
	h, b := validHello(), validBatch()
	c := protocol.Command{Type: protocol.TypeCommand, ID: "c1", Breaker: "payments", Action: protocol.ActionForceOpen, TTLMillis: 60000}
	for _, v := range []any{h, b, c} {
		data, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"type":"batch","seq":1,"windows":[{"breaker":"payments","latency":[1,2]}]}`))
	f.Add([]byte(`{"type":"hello","protocol":1,"breakers":null}`))
	f.Add([]byte(`{"type":"batch","seq":18446744073709551615,"sent_at":-1}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, msg, err := decodeAndValidate(data)
		if err != nil || msg == nil {
			return
		}
		again, err := json.Marshal(msg)
		if err != nil {
			t.Fatalf("re-encoding a valid %s: %v", typ, err)
		}
		if _, _, err := decodeAndValidate(again); err != nil {
			t.Fatalf("valid %s no longer validates after a round trip: %v\n%s", typ, err, again)
		}
	})
}

func TestCountsAddAndRejected(t *testing.T) {
	a := protocol.Counts{Admitted: 1, RejectedOpen: 2, RejectedHalfOpen: 3}
	a.Add(protocol.Counts{Admitted: 4, RejectedForced: 5, RejectedBulkhead: 6, FallbackFailure: 7, Misuse: 8, RejectedRamp: 9})
	want := protocol.Counts{Admitted: 5, RejectedOpen: 2, RejectedHalfOpen: 3, RejectedForced: 5, RejectedBulkhead: 6, FallbackFailure: 7, Misuse: 8, RejectedRamp: 9}
	if a != want {
		t.Fatalf("Add = %+v, want %+v", a, want)
	}
	if got := a.Rejected(); got != 25 {
		t.Fatalf("Rejected = %d, want 25 (ramp rejections included)", got)
	}
}

func TestQuantileMillisInterpolatesInsideTheBucket(t *testing.T) {
	h := make([]int64, protocol.NumLatencyBuckets)
	h[2] = 10 // 10 calls in (2, 5] ms
	h[3] = 10 // 10 calls in (5, 10] ms
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.25, 3.5}, {0.5, 5}, {0.75, 7.5}, {1, 10}} {
		if got, ok := protocol.QuantileMillis(h, c.q); !ok || got != c.want {
			t.Errorf("q%v = %v, %v; want %v", c.q, got, ok, c.want)
		}
	}
	h[protocol.NumLatencyBuckets-1] = 1000 // slower than the last bound
	if got, _ := protocol.QuantileMillis(h, 0.99); got != protocol.LatencyBoundsMillis[len(protocol.LatencyBoundsMillis)-1] {
		t.Errorf("overflow q99 = %v", got)
	}
	if _, ok := protocol.QuantileMillis(make([]int64, protocol.NumLatencyBuckets), 0.5); ok {
		t.Error("an empty histogram has a quantile")
	}
}

func TestSettingsRoundTripAndCompare(t *testing.T) {
	a := protocol.NewSettings(map[string]string{"Timeout": "30s", "MaxRequests": "1"})
	b := protocol.NewSettings(map[string]string{"MaxRequests": "1", "Timeout": "30s"})
	if a != b {
		t.Fatalf("equal settings compare unequal: %v vs %v", a, b)
	}
	if got, want := a.String(), "MaxRequests=1, Timeout=30s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	cfg := protocol.BreakerConfig{Name: "db", Library: "x", Settings: a, HoldsUnsupported: true}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"settings":{"MaxRequests":"1","Timeout":"30s"}`) || !strings.Contains(string(data), `"holds_unsupported":true`) {
		t.Errorf("wire form %s lacks the settings object or the capability flag", data)
	}
	var back protocol.BreakerConfig
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back != cfg {
		t.Errorf("round trip: got %+v, want %+v", back, cfg)
	}
	plain, _ := json.Marshal(protocol.BreakerConfig{Name: "db"})
	for _, f := range []string{"library", "settings", "holds_unsupported"} {
		if strings.Contains(string(plain), f) {
			t.Errorf("an sdk/breaker config carries %q: %s", f, plain)
		}
	}
	if err := json.Unmarshal([]byte(`{"name":"db","settings":{"a":1}}`), &back); err == nil {
		t.Error("a setting that is not a string was accepted")
	}
}

func TestHelloValidateAt(t *testing.T) {
	h := validHello()
	h.StartedAt = now + protocol.MaxStartedAtAheadMillis + 1
	checkErr(t, h.ValidateAt(now), "started_at is 86400001 ms ahead")
	h.StartedAt = now + 10*60_000 // a clock ten minutes ahead is skew, not a refusal
	checkErr(t, h.ValidateAt(now), "")
}

func TestCountsAddSaturates(t *testing.T) {
	c := protocol.Counts{Admitted: math.MaxInt64 - 1}
	c.Add(protocol.Counts{Admitted: 9e18})
	if c.Admitted != math.MaxInt64 {
		t.Fatalf("admitted %d, want math.MaxInt64", c.Admitted)
	}
}

// TestBatchValidateDeclaredBreakers: a window's breaker must be one the
// hello declared, in any order, for hellos whose names are looked up in
// their list (a few) and in a map (many).
func TestBatchValidateDeclaredBreakers(t *testing.T) {
	for _, n := range []int{1, 5, 32, 33, 200} {
		hello := validHello()
		base := hello.Breakers[0]
		hello.Breakers = nil
		for i := range n {
			c := base
			c.Name = fmt.Sprintf("dep-%03d", i)
			hello.Breakers = append(hello.Breakers, c)
		}
		b := validBatch()
		b.Transitions, b.CommandResults = nil, nil
		w := b.Windows[0]
		b.Windows = nil
		for i := n - 1; i >= 0; i-- { // the reverse of the hello's order
			w.Breaker = hello.Breakers[i].Name
			b.Windows = append(b.Windows, w)
		}
		if err := b.Validate(&hello, now); err != nil {
			t.Fatalf("%d breakers: %v", n, err)
		}
		b.Windows[n/2].Breaker = "dep-x"
		checkErr(t, b.Validate(&hello, now), fmt.Sprintf("windows[%d].breaker \"dep-x\" was not declared in hello", n/2))
		b.Windows[n/2].Breaker = "anything"
		if err := b.Validate(nil, now); err != nil {
			t.Fatalf("%d breakers, no hello: %v", n, err)
		}
	}
}
