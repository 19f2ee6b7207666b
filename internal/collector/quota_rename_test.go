package collector

// A hello that renames its instance's breakers replaces what the
// instance declared: the dependencies only it declared, and the new hello
// no longer does, are not counted against the service's, the token's and
// the collector's dependency quotas (issue 27, item 3; a reviewer found
// them counted twice, so that `--max-dependencies-per-service 30` refused
// an instance going from 20 breakers to 20 others).

import (
	"encoding/json"
	"fmt"
	"github.com/cbdash/cbdash/internal/live"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// depNames returns the sorted breaker names of service's dependencies the
// collector holds.
func depNames(h *harness, service string) []string {
	var names []string
	for _, d := range h.col.Dependencies() {
		if d.Service == service {
			names = append(names, d.Breaker)
		}
	}
	slices.Sort(names)
	return names
}

// wideNames is the sorted names wideHello gives n breakers of prefix.
func wideNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint(prefix, i)
	}
	slices.Sort(names)
	return names
}

// rehelloAndAck sends hello hi on a's open connection, then a batch of seq,
// and returns the refusal's reason, "" when the batch was acknowledged
// (the collector handles a connection's messages in order: the re-hello
// was admitted).
func rehelloAndAck(t *testing.T, h *harness, a *rawAgent, hi protocol.Hello, seq uint64) string {
	t.Helper()
	a.send(hi)
	a.send(protocol.Batch{Type: protocol.TypeBatch, Seq: seq, SentAt: h.now().UnixMilli()})
	typ, data, err := a.next()
	if err != nil {
		t.Fatalf("re-hello of %s/%s: %v", hi.Service, hi.Instance, err)
	}
	switch typ {
	case protocol.TypeAck:
		return ""
	case protocol.TypeError:
		var e protocol.Error
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatal(err)
		}
		if !e.Fatal || e.Retry {
			t.Fatalf("re-hello of %s/%s: %+v, want a permanent fatal error", hi.Service, hi.Instance, e)
		}
		return e.Reason
	}
	t.Fatalf("re-hello of %s/%s: got %s %s", hi.Service, hi.Instance, typ, data)
	return ""
}

// renameCases make each of the three dependency counts the one that
// binds, at 30: 20 breakers renamed to 20 others are 20, not 40.
var renameCases = []struct {
	name   string
	limits func(*Limits)
	// others is how many dependencies another service holds first
	// (under another token), for the collector's limit.
	others int
}{
	{"service", func(l *Limits) { l.MaxDependenciesPerService = 30 }, 0},
	{"token", func(l *Limits) { l.MaxDependenciesPerToken = 30 }, 0},
	{"collector", func(l *Limits) { l.MaxDependencies, l.MaxDependenciesPerToken = 40, 30 }, 10},
}

// startRenameHarness starts a collector with tc's limits, another
// service holding tc.others dependencies.
func startRenameHarness(t *testing.T, limits func(*Limits), others int) (*harness, int64) {
	h := startHarness(t, "", func(c *Config) { limits(&c.Limits) })
	started := h.now().Add(-time.Minute).UnixMilli()
	if others > 0 {
		other, err := h.store.CreateAgentToken(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		if reason := quotaAnswer(t, h, other, wideHello("svcA", "o1", "o", others, started)); reason != "" {
			t.Fatalf("the other service's hello: refused: %s", reason)
		}
	}
	return h, started
}

func TestARenamingHelloReplacesItsInstancesDependencies(t *testing.T) {
	t.Parallel()
	for _, tc := range renameCases {
		t.Run(tc.name+"/websocket", func(t *testing.T) {
			h, started := startRenameHarness(t, tc.limits, tc.others)
			a := dialRaw(t, h, h.token)
			a.send(wideHello("svcB", "b1", "a", 20, started))
			a.expect(protocol.TypeWelcome, nil)
			// A re-hello on the same connection renaming them.
			if reason := rehelloAndAck(t, h, a, wideHello("svcB", "b1", "b", 20, started), 1); reason != "" {
				t.Fatalf("a re-hello renaming the instance's 20 breakers: refused: %s", reason)
			}
			if got, want := depNames(h, "svcB"), wideNames("b", 20); !slices.Equal(got, want) {
				t.Fatalf("svcB's dependencies after the re-hello: %v, want %v", got, want)
			}
			// One keeping 10 of them and adding 15: 25.
			hi := wideHello("svcB", "b1", "c", 25, started)
			copy(hi.Breakers, wideHello("svcB", "b1", "b", 10, started).Breakers)
			if reason := rehelloAndAck(t, h, a, hi, 2); reason != "" {
				t.Fatalf("a re-hello keeping 10 of the instance's 20 breakers and declaring 15 new ones: refused: %s", reason)
			}
			if n := len(depNames(h, "svcB")); n != 25 {
				t.Fatalf("svcB holds %d dependencies, want 25", n)
			}
		})
		t.Run(tc.name+"/http", func(t *testing.T) {
			h, started := startRenameHarness(t, tc.limits, tc.others)
			ingest := func(hi protocol.Hello, seq uint64) {
				t.Helper()
				status, body := postRaw(t, h.srv.URL+"/api/v1/ingest", h.token, mustJSON(t, protocol.IngestRequest{
					Hello: hi, Batch: protocol.Batch{Type: protocol.TypeBatch, Seq: seq, SentAt: h.now().UnixMilli()},
				}))
				if status != 200 {
					t.Fatalf("ingest %d of %s/%s: %d %s", seq, hi.Service, hi.Instance, status, body)
				}
			}
			ingest(wideHello("svcB", "a1", "a", 20, started), 1)
			ingest(wideHello("svcB", "a1", "b", 20, started), 2)
			if got, want := depNames(h, "svcB"), wideNames("b", 20); !slices.Equal(got, want) {
				t.Fatalf("svcB's dependencies after the renaming ingest: %v, want %v", got, want)
			}
			// A restart of the instance (another started_at) renaming them again.
			ingest(wideHello("svcB", "a1", "c", 20, started+1), 1)
			if got, want := depNames(h, "svcB"), wideNames("c", 20); !slices.Equal(got, want) {
				t.Fatalf("svcB's dependencies after the restart: %v, want %v", got, want)
			}
		})
	}
}

// TestARenamingHelloStillCountsWhatOthersDeclare: the dependencies another
// instance of the service still declares go on counting when one instance
// renames its breakers; the refusal says what it did not count.
func TestARenamingHelloStillCountsWhatOthersDeclare(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", func(c *Config) { c.Limits.MaxDependenciesPerService = 30 })
	started := h.now().Add(-time.Minute).UnixMilli()
	b2 := dialRaw(t, h, h.token)
	b2.send(wideHello("svcB", "b2", "a", 10, started)) // a0..a9
	b2.expect(protocol.TypeWelcome, nil)
	b1 := dialRaw(t, h, h.token)
	b1.send(wideHello("svcB", "b1", "a", 20, started)) // a0..a19
	b1.expect(protocol.TypeWelcome, nil)

	// b1 renames its 20: a0..a9 stay (b2's), a10..a19 go; 10 + 20 new = 30.
	if reason := rehelloAndAck(t, h, b1, wideHello("svcB", "b1", "b", 20, started), 1); reason != "" {
		t.Fatalf("b1 renaming its breakers, 10 of them still b2's: refused: %s", reason)
	}
	if got, want := depNames(h, "svcB"), append(wideNames("a", 10), wideNames("b", 20)...); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("svcB's dependencies: %v, want b2's a0..a9 and b1's b0..b19", got)
	}
	// b1 renames its 20 to 21 others: b2's 10 still count, 10 + 21 > 30.
	reason := rehelloAndAck(t, h, b1, wideHello("svcB", "b1", "c", 21, started), 2)
	const want = `service "svcB" has 10 dependencies besides the 20 that no instance would declare after this hello; 21 new ones would pass the 30 one service may have`
	if !strings.Contains(reason, want) {
		t.Fatalf("b1 renaming its breakers past the quota with b2's still declared: %s, want a refusal with %s", reason, want)
	}
	if got := refusedCount(t, h, "service_dependency_limit"); got != 1 {
		t.Errorf(`cbdash_collector_agent_refused_total{reason="service_dependency_limit"} = %d, want 1`, got)
	}
}

// TestANewInstanceIsNotChargedForTheOfflineOneItReplaces: a new instance
// over the instance quota takes the place of an offline one, which is
// forgotten with the dependencies only it declared: those are not
// counted against the new instance's hello either.
func TestANewInstanceIsNotChargedForTheOfflineOneItReplaces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limits func(*Limits)
	}{
		{"service", func(l *Limits) { l.MaxInstancesPerService, l.MaxDependenciesPerService = 1, 30 }},
		{"token", func(l *Limits) { l.MaxInstancesPerToken, l.MaxDependenciesPerToken = 1, 30 }},
		{"collector", func(l *Limits) { l.MaxInstancesPerService, l.MaxDependencies, l.MaxDependenciesPerToken = 1, 35, 30 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := breakertest.NewClock(clocktest.Epoch())
			h := startHarness(t, "", func(c *Config) { c.Clock = clk; tc.limits(&c.Limits) })
			started := clk.Now().Add(-time.Minute).UnixMilli()
			old := dialRaw(t, h, h.token)
			old.send(wideHello("svcB", "i1", "a", 20, started))
			old.expect(protocol.TypeWelcome, nil)
			old.conn.CloseNow()
			eventually.True(t, "the old instance's session ends", func() bool { return h.col.live.ConnOf(live.Key{Service: "svcB", Instance: "i1"}) == nil })
			clk.Advance(16 * time.Second) // past StaleAfter (15 s)
			if reason := quotaAnswer(t, h, h.token, wideHello("svcB", "i2", "b", 20, started+1)); reason != "" {
				t.Fatalf("a new instance with 20 other breakers in the place of the offline one: refused: %s", reason)
			}
			if got, want := depNames(h, "svcB"), wideNames("b", 20); !slices.Equal(got, want) {
				t.Fatalf("svcB's dependencies: %v, want the new instance's %v", got, want)
			}
		})
	}
}
