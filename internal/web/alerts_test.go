package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/web"
)

// hook is a webhook receiver on loopback that records the bodies it gets.
type hook struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
}

func newHook(t *testing.T) *hook {
	t.Helper()
	h := &hook{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, string(b))
		h.mu.Unlock()
	}))
	h.Listener.Close()
	h.Listener = l
	h.Start()
	t.Cleanup(h.Close)
	return h
}

func (h *hook) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.bodies)
}

// event is the "event" of every body received.
func (h *hook) events() []string {
	var out []string
	for _, b := range h.received() {
		var m struct{ Event, Subject string }
		_ = json.Unmarshal([]byte(b), &m)
		out = append(out, m.Event+" "+m.Subject)
	}
	return out
}

func TestAlertsPageEditsRulesThatFireAndCountOnTheOverview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	rcv := newHook(t)
	otto, vera, ada := h.login("otto"), h.login("vera"), h.login("ada")

	if res := vera.postForm("/alerts/rules", url.Values{"service": {"checkout"}, "kind": {"open"}, "webhook_url": {rcv.URL}}); res.status != http.StatusForbidden {
		t.Fatalf("a viewer created a rule: %d", res.status)
	}
	bad := otto.postForm("/alerts/rules", url.Values{"service": {"checkout"}, "kind": {"open"}, "hold": {"soon"}, "webhook_url": {rcv.URL}})
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.body, "hold must be a duration") || !strings.Contains(bad.body, `value="checkout"`) {
		t.Fatalf("a bad hold: %d, want 400 naming hold with the form kept:\n%s", bad.status, bad.body)
	}
	secret := rcv.URL + "/services/T000/B000/secret-part"
	res := otto.postForm("/alerts/rules", url.Values{"name": {"payments down"}, "service": {"checkout"}, "breaker": {"payments"},
		"kind": {"open"}, "hold": {"1s"}, "webhook_url": {secret}, "format": {"json"}})
	if res.status != http.StatusSeeOther || !strings.Contains(res.header.Get("Location"), "created") {
		t.Fatalf("create: %d %s", res.status, res.header.Get("Location"))
	}
	rules, err := h.st.AlertRules(context.Background())
	if err != nil || len(rules) != 1 {
		t.Fatalf("rules = %+v, %v", rules, err)
	}
	id := itoa64(rules[0].ID)

	page := vera.get("/alerts").body
	if strings.Contains(page, "secret-part") || !strings.Contains(page, "payments down") {
		t.Errorf("a viewer sees the webhook's secret path, or not the rule:\n%s", page)
	}
	if !strings.Contains(ada.get("/alerts").body, "secret-part") {
		t.Error("an admin does not see the full webhook URL")
	}
	if strings.Contains(vera.get("/alerts").body, `data-testid="rule-form"`) {
		t.Error("a viewer is shown the rule editor")
	}
	// An operator (not admin) edits the rule without seeing the URL: an
	// empty field keeps it.
	edit := otto.get("/alerts?edit=" + id).body
	if strings.Contains(edit, "secret-part") || !strings.Contains(edit, "Edit rule "+id) {
		t.Fatalf("edit form for an operator:\n%s", edit)
	}
	res = otto.postForm("/alerts/rules/"+id, url.Values{"name": {"payments open"}, "service": {"checkout"}, "breaker": {"payments"},
		"kind": {"open"}, "hold": {"1s"}, "webhook_url": {""}, "format": {"json"}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("update: %d %s", res.status, res.body)
	}
	if r, _ := h.st.AlertRule(context.Background(), rules[0].ID); r.Name != "payments open" || r.WebhookURL != secret {
		t.Fatalf("after the edit: %+v, want the new name and the same webhook", r)
	}

	// A test notification goes out at once, and says so.
	res = otto.postForm("/alerts/rules/"+id+"/test", url.Values{})
	loc, _ := url.QueryUnescape(res.header.Get("Location"))
	if res.status != http.StatusSeeOther || !strings.Contains(loc, "delivered (HTTP 200") {
		t.Fatalf("test: %d %q", res.status, loc)
	}
	if got := rcv.events(); len(got) != 1 || got[0] != "test checkout/payments" {
		t.Fatalf("webhook got %q, want one test", got)
	}

	// The breaker opens: the rule fires, the overview counts it, the page
	// lists it with since when.
	h.report("checkout", "payments", "checkout-1", "open")
	eventually.True(t, "the alert delivered", func() bool {
		h.tick()
		return len(rcv.received()) == 2
	})
	if got := rcv.events()[1]; got != "firing checkout/payments" {
		t.Fatalf("second delivery = %q", got)
	}
	overview := vera.get("/").body
	if !regexp.MustCompile(`data-testid="fleet-alerts"[^>]*>\s*<span class="n">1</span>`).MatchString(overview) {
		t.Errorf("the overview does not count one alert firing:\n%s", overview)
	}
	page = vera.get("/alerts").body
	since := h.clock.Now().UTC().Format("2006-01-02 15:04")
	if !strings.Contains(page, `data-testid="firing-subject">checkout/payments`) || !strings.Contains(page, since) {
		t.Errorf("the alerts page does not list the alert firing since %s:\n%s", since, page)
	}

	if frag := vera.get("/alerts?fragment=firing").body; strings.Contains(frag, "<html") || !strings.Contains(frag, `data-testid="firing-subject">checkout/payments`) {
		t.Errorf("the firing fragment:\n%s", frag)
	}

	res = otto.postForm("/alerts/rules/"+id+"/delete", url.Values{})
	if res.status != http.StatusSeeOther {
		t.Fatalf("delete: %d", res.status)
	}
	if rules, _ := h.st.AlertRules(context.Background()); len(rules) != 0 {
		t.Fatalf("rules after delete: %+v", rules)
	}
	if !strings.Contains(vera.get("/").body, `<span class="n">0</span> <span class="l">alerts firing`) &&
		!regexp.MustCompile(`data-testid="fleet-alerts"[^>]*>\s*<span class="n">0</span>`).MatchString(vera.get("/").body) {
		t.Error("the overview still counts the deleted rule's alert")
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// curlExample is one curl command of a doc: method, URL, headers, body.
type curlExample struct {
	method, url, body string
	headers           http.Header
}

// curlExamples extracts the curl commands of a Markdown file's indented
// or fenced blocks (lines joined at a trailing backslash; the body kept
// as written, with its newlines).
func curlExamples(t *testing.T, path string) []curlExample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []curlExample
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(line, "curl ") {
			continue
		}
		cmd := line
		for strings.HasSuffix(cmd, `\`) || strings.Count(cmd, "'")%2 == 1 {
			cmd = strings.TrimSuffix(cmd, `\`)
			i++
			if i >= len(lines) {
				break
			}
			sep := " "
			if strings.Count(cmd, "'")%2 == 1 {
				sep = "\n"
			}
			cmd += sep + strings.TrimSpace(lines[i])
		}
		out = append(out, parseCurl(t, cmd))
	}
	return out
}

// parseCurl reads the curl options the docs use: -H, -X, -d and a URL.
func parseCurl(t *testing.T, cmd string) curlExample {
	t.Helper()
	var words []string
	var cur strings.Builder
	quote := rune(0)
	inWord := false
	for _, r := range cmd {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\n' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	ex := curlExample{method: http.MethodGet, headers: http.Header{}}
	for i := 1; i < len(words); i++ {
		switch w := words[i]; w {
		case "-H":
			i++
			k, v, _ := strings.Cut(words[i], ":")
			ex.headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case "-X":
			i++
			ex.method = words[i]
		case "-d", "--data":
			i++
			ex.body = words[i]
			if ex.method == http.MethodGet {
				ex.method = http.MethodPost
			}
		case "-s", "-sS", "-f":
		default:
			if strings.HasPrefix(w, "-") {
				t.Fatalf("curl option %s of %q is not understood by this test", w, cmd)
			}
			ex.url = w
		}
	}
	return ex
}

// TestIncidentsAndAlertsDocExamplesWork sends each curl example of
// docs/incidents-and-alerts.md, as written (method, headers, body), to a
// real server with an operator's API token, and wants 2xx.
func TestIncidentsAndAlertsDocExamplesWork(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 2, 0))
	examples := curlExamples(t, "../../docs/incidents-and-alerts.md")
	if len(examples) == 0 {
		t.Fatal("no curl example found in the doc")
	}
	u, _, err := h.st.UserByName(context.Background(), "otto")
	if err != nil {
		t.Fatal(err)
	}
	token, err := h.st.CreateUserToken(context.Background(), u.ID, "doc")
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(h.url)
	for _, ex := range examples {
		t.Run(ex.method+" "+ex.url, func(t *testing.T) {
			target, err := url.Parse(strings.ReplaceAll(ex.url, "$CBDASH_SERVER", "http://127.0.0.1:8080"))
			if err != nil {
				t.Fatal(err)
			}
			target.Scheme, target.Host = base.Scheme, base.Host // the doc's server is this one
			req, _ := http.NewRequest(ex.method, target.String(), strings.NewReader(ex.body))
			for k, vs := range ex.headers {
				for _, v := range vs {
					req.Header.Add(k, strings.ReplaceAll(v, "$TOKEN", token))
				}
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode/100 != 2 {
				t.Fatalf("%s %s answered %d: %s", ex.method, ex.url, res.StatusCode, b)
			}
		})
	}
	if rules, _ := h.st.AlertRules(context.Background()); len(rules) == 0 || rules[0].Kind != cbdash.AlertOpen {
		t.Errorf("the doc's rule was not created: %+v", rules)
	}
}

// An operator who is not an admin edits a rule, keeping its hidden
// webhook URL (empty field), and the edit is refused: the editor shown
// again must not fill the field with the stored URL (issue 27, item 6).
func TestAlertsRefusedEditKeepsTheWebhookHidden(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{}, dep("checkout", "payments", 1, 0))
	rcv := newHook(t)
	otto, ada := h.login("otto"), h.login("ada")
	secret := rcv.URL + "/SECRET-ONE"
	if res := ada.postForm("/alerts/rules", url.Values{"service": {"checkout"}, "kind": {"open"}, "webhook_url": {secret}}); res.status != http.StatusSeeOther {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	rules, err := h.st.AlertRules(context.Background())
	if err != nil || len(rules) != 1 {
		t.Fatalf("rules = %+v, %v", rules, err)
	}
	id := itoa64(rules[0].ID)
	for _, bad := range []url.Values{
		{"service": {"checkout"}, "kind": {"open"}, "hold": {"soon"}, "webhook_url": {""}},  // refused by the page
		{"service": {"checkout"}, "kind": {"never"}, "hold": {"1s"}, "webhook_url": {""}},   // refused by the store
		{"service": {"checkout"}, "kind": {"open"}, "margin": {"200"}, "webhook_url": {""}}, // refused by the store
	} {
		res := otto.postForm("/alerts/rules/"+id, bad)
		if res.status != http.StatusBadRequest || !strings.Contains(res.body, "Not saved") {
			t.Fatalf("a bad edit %v: %d, want 400 with the editor", bad, res.status)
		}
		if strings.Contains(res.body, "SECRET") || !strings.Contains(res.body, "hidden: leave empty to keep it") {
			t.Errorf("the operator's refused edit %v shows the webhook URL, or not as hidden:\n%s", bad, res.body)
		}
		if res := ada.postForm("/alerts/rules/"+id, bad); !strings.Contains(res.body, secret) {
			t.Errorf("the admin's refused edit %v does not show the webhook URL:\n%s", bad, res.body)
		}
	}
	if r, _ := h.st.AlertRule(context.Background(), rules[0].ID); r.WebhookURL != secret {
		t.Errorf("after the refused edits the webhook is %q", r.WebhookURL)
	}
	// Nor does a viewer's page.
	if page := h.login("vera").get("/alerts").body; strings.Contains(page, "SECRET") || !strings.Contains(page, rcv.URL+"/…") {
		t.Errorf("the viewer's Alerts page:\n%s", page)
	}
}
