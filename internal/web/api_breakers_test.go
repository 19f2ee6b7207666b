package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestBreakerSummariesStaySmallAndMembersPageExactlyOnce builds the load
// of `cbdash loadgen` (1,000 instances x 20 breakers of one service)
// through the real collector's HTTP ingest: the dependency summaries
// stay under 200 KB, a dependency's members page through every instance
// once, the odd ones (open, half-open, forced) before the closed ones,
// and the requests of /api/v1 before issue 15 (the list, one dependency
// without a limit) still answer every member.
func TestBreakerSummariesStaySmallAndMembersPageExactlyOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("1,000 ingests")
	}
	const instances, breakers = 1000, 20
	h := newHarness(t, web.Config{})
	now := h.clock.Now()
	names := make([]string, breakers)
	for i := range names {
		names[i] = fmt.Sprintf("dep-%02d", i)
	}
	odd := map[string]string{} // instance -> its state of dep-03, when not closed
	// Eight agents post at once (each instance's one batch from one of
	// them), as a fleet does: a thousand posts one after another would
	// each wait for a group commit of its own.
	type post struct {
		inst string
		b    protocol.Batch
	}
	posts := make(chan post)
	errs := make(chan error, instances)
	var agents sync.WaitGroup
	for range 8 {
		agents.Go(func() {
			for p := range posts {
				if _, err := h.tryIngest("shop", p.inst, p.b); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range instances {
		inst := fmt.Sprintf("i-%04d", i)
		var b protocol.Batch
		for _, n := range names {
			state := protocol.StateClosed
			if n == "dep-03" {
				switch i % 50 {
				case 7:
					state = protocol.StateOpen
				case 19:
					state = protocol.StateHalfOpen
				case 33:
					state = protocol.StateForcedOpen
				}
			}
			if state != protocol.StateClosed {
				odd[inst] = state
				cause := map[string]string{protocol.StateOpen: protocol.CauseFailureRate, protocol.StateHalfOpen: protocol.CauseOpenElapsed,
					protocol.StateForcedOpen: protocol.CauseAgentCommand}[state]
				b.Transitions = append(b.Transitions, protocol.Transition{Breaker: n, From: protocol.StateClosed, To: state,
					At: now.Add(-time.Second).UnixMilli(), Cause: protocol.Cause{Kind: cause}})
			}
			b.Windows = append(b.Windows, protocol.Window{Breaker: n, Start: now.Add(-time.Second).UnixMilli(), Millis: 1000, State: state,
				Counts:   protocol.Counts{Admitted: 40, Successes: 39, Failures: 1, Errors: 1},
				Headroom: protocol.Headroom{Calls: 100, Failures: 3, FailureRate: 3, FailureRateThreshold: 50, MinimumCalls: 10}})
		}
		posts <- post{inst, b}
	}
	close(posts)
	agents.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually.True(t, "1,000 instances of shop/dep-03", func() bool {
		d, err := h.col.Dependency(cbdash.DependencyKey{Service: "shop", Breaker: "dep-03"})
		return err == nil && d.Instances == instances
	})
	otto, _, _ := h.st.UserByName(t.Context(), "otto")
	token, err := h.st.CreateUserToken(t.Context(), otto.ID, "pages")
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, h.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, res.StatusCode, body)
		}
		return body
	}

	t.Run("the dependency summaries are under 200 KB", func(t *testing.T) {
		body := get("/api/v1/dependencies")
		var deps []map[string]any
		if err := json.Unmarshal(body, &deps); err != nil || len(deps) != breakers {
			t.Fatalf("%d dependencies (%v), want %d", len(deps), err, breakers)
		}
		if len(body) >= 200<<10 {
			t.Errorf("GET /api/v1/dependencies is %d bytes at %d x %d, want under 200 KB", len(body), instances, breakers)
		}
		t.Logf("GET /api/v1/dependencies: %d bytes for %d x %d", len(body), instances, breakers)
		for _, d := range deps {
			if _, ok := d["per_instance"]; ok {
				t.Fatalf("a summary carries its members: %v", d["breaker"])
			}
			if d["breaker"] == "dep-03" && (d["state"] != protocol.StateOpen || d["instances"] != float64(instances)) {
				t.Errorf("dep-03 summary: state %v, %v instances", d["state"], d["instances"])
			}
		}
	})

	for _, by := range []string{"cursor", "offset"} {
		t.Run("members page through every instance once, the odd ones first, by "+by, func(t *testing.T) {
			var seen []*cbdash.InstanceBreaker
			next, offset := "", 0
			for pages := 0; ; pages++ {
				if pages > instances {
					t.Fatal("the pages do not end")
				}
				q := url.Values{"limit": {"150"}}
				if by == "cursor" && next != "" {
					q.Set("cursor", next)
				}
				if by == "offset" {
					q.Set("offset", fmt.Sprint(offset))
				}
				var page struct {
					cbdash.Dependency
					Members int    `json:"members"`
					Next    string `json:"next"`
				}
				if err := json.Unmarshal(get("/api/v1/breakers/shop/dep-03?"+q.Encode()), &page); err != nil {
					t.Fatal(err)
				}
				if page.Members != instances || len(page.PerInstance) > 150 {
					t.Fatalf("page of %d members of %d", len(page.PerInstance), page.Members)
				}
				seen = append(seen, page.PerInstance...)
				offset += len(page.PerInstance)
				if page.Next == "" {
					break
				}
				next = page.Next
			}
			ids := map[string]int{}
			for _, m := range seen {
				ids[m.Instance]++
			}
			if len(seen) != instances || len(ids) != instances {
				t.Fatalf("%d members seen, %d distinct, want each of %d once", len(seen), len(ids), instances)
			}
			for i, m := range seen[:len(odd)] {
				if odd[m.Instance] != m.State {
					t.Fatalf("member %d is %s %s; the %d odd ones should come first", i, m.Instance, m.State, len(odd))
				}
			}
			rank := func(s string) int {
				return slices.Index([]string{protocol.StateOpen, protocol.StateHalfOpen, protocol.StateForcedOpen, protocol.StateClosed}, s)
			}
			if !slices.IsSortedFunc(seen, func(a, b *cbdash.InstanceBreaker) int {
				if r := rank(a.State) - rank(b.State); r != 0 {
					return r
				}
				return strings.Compare(a.Instance, b.Instance)
			}) {
				t.Error("members are not ordered by state (open, half-open, forced open, closed), then instance")
			}
		})
	}

	t.Run("the list of /api/v1 before issue 15 has every member of every dependency", func(t *testing.T) {
		body := get("/api/v1/breakers")
		var deps []cbdash.Dependency
		if err := json.Unmarshal(body, &deps); err != nil || len(deps) != breakers {
			t.Fatalf("%d dependencies (%v), want %d", len(deps), err, breakers)
		}
		for _, d := range deps {
			if len(d.PerInstance) != instances {
				t.Fatalf("%s: %d members in per_instance, want %d", d.DependencyKey, len(d.PerInstance), instances)
			}
		}
		t.Logf("GET /api/v1/breakers: %d bytes for %d x %d", len(body), instances, breakers)
	})

	t.Run("a page is at most 1000 members, 100 by default, every member without limit, cursor or offset", func(t *testing.T) {
		var page struct {
			PerInstance []cbdash.InstanceBreaker `json:"per_instance"`
			Members     int                      `json:"members"`
			Next        string                   `json:"next"`
		}
		if err := json.Unmarshal(get("/api/v1/breakers/shop/dep-00"), &page); err != nil || len(page.PerInstance) != instances || page.Members != instances || page.Next != "" {
			t.Fatalf("without limit, cursor or offset: %d members of %d, next %q (%v), want every one as before issue 15", len(page.PerInstance), page.Members, page.Next, err)
		}
		page.PerInstance, page.Next = nil, ""
		if err := json.Unmarshal(get("/api/v1/breakers/shop/dep-00?offset=0"), &page); err != nil || len(page.PerInstance) != web.DefaultMemberPage || page.Next == "" {
			t.Fatalf("default page: %d members, next %q (%v)", len(page.PerInstance), page.Next, err)
		}
		req, _ := http.NewRequest(http.MethodGet, h.url+"/api/v1/breakers/shop/dep-00?limit=1001", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("limit=1001: %d, want 400", res.StatusCode)
		}
	})
}
