package main

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/eventually"
)

var (
	bannerAdmin    = regexp.MustCompile(`admin login:\s+admin / (\S+)`)
	bannerReceiver = regexp.MustCompile(`alert receiver:\s+(http://127\.0\.0\.1:\d+/alerts)`)
	csrfField      = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)
)

// TestDemoPrintsTheAdminLoginAndAnAlertReachesItsReceiver follows the
// README's Try-it as a newcomer would, reading only the demo's output: the
// admin login it prints logs in, and an alert reaches the demo's own
// receiver (checkout's inventory breaker opens on the demo's script) and
// is printed there.
func TestDemoPrintsTheAdminLoginAndAnAlertReachesItsReceiver(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the whole demo until inventory opens")
	}
	d := startDemo(t, filepath.Join(t.TempDir(), "demo.db"))
	banner := d.out.String()
	m := bannerAdmin.FindStringSubmatch(banner)
	if m == nil || len(m[1]) < 8 {
		t.Fatalf("the banner has no admin login:\n%s", banner)
	}
	if !bannerReceiver.MatchString(banner) {
		t.Errorf("the banner has no alert receiver:\n%s", banner)
	}
	jar, _ := cookiejar.New(nil)
	// Generous: bcrypt at its default cost under the race detector on a
	// busy machine takes seconds.
	c := &http.Client{Jar: jar, Timeout: 2 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(d.url + "/login")
	if err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := res.Body.Read(buf)
		page.Write(buf[:n])
		if err != nil {
			break
		}
	}
	res.Body.Close()
	tok := csrfField.FindStringSubmatch(page.String())
	if tok == nil {
		t.Fatal("the login page has no CSRF field")
	}
	res, err = c.PostForm(d.url+"/login", url.Values{"_csrf": {tok[1]}, "user": {"admin"}, "password": {m[1]}, "next": {"/admin"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("logging in as admin with the banner's password: %d, want 303", res.StatusCode)
	}
	res, err = c.Get(d.url + "/admin")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("the admin page after the login: %d", res.StatusCode)
	}

	// Real time: inventory's script trips it about 25 s in; the alert is
	// delivered within a second of the open.
	start := time.Now()
	eventually.Within(t, 3*time.Minute, "an alert printed by the demo's receiver", func() bool {
		return strings.Contains(d.out.String(), "\ndemo alert receiver got: ")
	})
	t.Logf("an alert reached the demo's receiver %v after start", time.Since(start).Round(time.Second))
	for _, line := range strings.Split(d.out.String(), "\n") {
		if strings.HasPrefix(line, "demo alert receiver got: ") {
			if !strings.Contains(line, "inventory") {
				t.Errorf("the receiver's line does not name inventory: %s", line)
			}
			break
		}
	}
}
