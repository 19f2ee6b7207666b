package agent_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/sdk/agent"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestConfigURLs(t *testing.T) {
	for _, c := range []struct {
		name    string
		url     string
		urls    []string
		wantErr string
	}{
		{name: "one URL", url: "ws://a/api/v1/agent"},
		{name: "URLs alone", urls: []string{"ws://a/api/v1/agent", "wss://b/api/v1/agent"}},
		{name: "URLs take precedence over a bad URL", url: "http://ignored", urls: []string{"ws://a/api/v1/agent"}},
		{name: "a bad entry is named", urls: []string{"ws://a/api/v1/agent", "http://b"}, wantErr: `URLs[1] "http://b"`},
		{name: "neither", wantErr: "URL"},
		{name: "too many", urls: make([]string, 65), wantErr: "URLs: 65 URLs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := agent.New(agent.Config{URL: c.url, URLs: c.urls, Service: "s", Instance: "i"})
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case c.wantErr != "" && (err == nil || !errors.Is(err, agent.ErrInvalidConfig) || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("New: %v, want ErrInvalidConfig naming %q", err, c.wantErr)
			}
		})
	}
}

// TestFailoverMovesToTheNextCollectorAndResendsWhatIsUnacked: the agent
// streams to the collector it started on; that collector is killed (its
// connections cut, its listener closed); the agent connects to the other
// one, which has none of its batches (its welcome says last_seq 0), and
// resends what the first one never acknowledged: the second collector
// ends up with every count that the first did not acknowledge.
func TestFailoverMovesToTheNextCollectorAndResendsWhatIsUnacked(t *testing.T) {
	a, b := newCollector(t), newCollector(t)
	f := newFixture(t, fixtureOptions{noStart: true, agent: func(c *agent.Config) {
		c.URL = ""
		c.URLs = []string{a.url(), b.url()}
	}})
	if err := f.agent.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the agent's report ticker", f.clock.ticking)
	waitFor(t, 5*time.Second, "the agent to connect", func() bool { return f.agent.Stats().Connected })
	first, other := a, b
	if f.agent.Stats().Collector == b.url() {
		first, other = b, a
	}
	calls(f.b, 7, false)
	f.tick()
	waitFor(t, 5*time.Second, "the first report acknowledged", func() bool { return f.agent.Stats().Acked >= 1 })
	// The first collector stores but stops acknowledging, then dies.
	first.mu.Lock()
	first.afterStore = func(protocol.Batch) bool { return false }
	first.mu.Unlock()
	calls(f.b, 5, true)
	f.tick()
	start := time.Now() // real time: the backoff and the dial are
	waitFor(t, 5*time.Second, "the agent on the other collector", func() bool { return f.agent.Stats().Collector == other.url() })
	t.Logf("failed over in %v", time.Since(start))
	first.stop()
	calls(f.b, 3, false)
	f.tick()
	f.close(t)
	firstSum, _ := first.sum("payments")
	otherSum, _ := other.sum("payments")
	// The first stored the 7 successes (acknowledged) and the 5 failures
	// (never acknowledged); the other, which has its own store here, got
	// the 5 failures again and the 3 successes that followed.
	if firstSum.Successes != 7 || firstSum.Failures != 5 || otherSum.Successes != 3 || otherSum.Failures != 5 {
		t.Fatalf("first collector has %+v, the other %+v", firstSum, otherSum)
	}
	if got := f.b.Snapshot().Totals.Admitted; got != 15 {
		t.Fatalf("breaker admitted %d calls, want 15", got)
	}
	if s := f.agent.Stats(); s.Reconnects < 1 || s.Collector != "" {
		t.Fatalf("stats after close %+v", s)
	}
}

// TestFailoverSkipsADeadCollector: whichever position the dead one has in
// URLs, the agent ends up on the live one.
func TestFailoverSkipsADeadCollector(t *testing.T) {
	dead := newCollector(t)
	deadURL := dead.url()
	dead.stop()
	for _, order := range []string{"dead first", "live first"} {
		t.Run(order, func(t *testing.T) {
			var live *collector
			f := newFixture(t, fixtureOptions{noStart: true, agent: func(c *agent.Config) {
				live = newCollector(t)
				c.URL = ""
				c.URLs = []string{deadURL, live.url()}
				if order == "live first" {
					c.URLs = []string{live.url(), deadURL}
				}
			}})
			if err := f.agent.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the agent on the live collector", func() bool { return f.agent.Stats().Collector == live.url() })
		})
	}
}

// TestFailoverLeavesACollectorThatDoesNotWelcome: a collector that accepts
// the websocket but never answers the hello costs HandshakeTimeout, then
// the agent tries the next one.
func TestFailoverLeavesACollectorThatDoesNotWelcome(t *testing.T) {
	mute := newCollector(t)
	mute.mode = silent
	live := newCollector(t)
	for _, urls := range [][]string{{mute.url(), live.url()}, {live.url(), mute.url()}} {
		f := newFixture(t, fixtureOptions{noStart: true, agent: func(c *agent.Config) {
			c.URL = ""
			c.URLs = urls
			c.HandshakeTimeout = 50 * time.Millisecond
		}})
		if err := f.agent.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the agent on the collector that welcomes", func() bool { return f.agent.Stats().Collector == live.url() })
		f.close(t)
	}
}
