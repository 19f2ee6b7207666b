package web_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cbdash/cbdash/internal/web"
)

// countingBody is an endless body of 'a' that counts what was read of it,
// up to size bytes.
type countingBody struct {
	size, read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	left := b.size.Load() - b.read.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > left {
		n = left
	}
	for i := range p[:n] {
		p[i] = 'a'
	}
	b.read.Add(n)
	return int(n), nil
}

func TestSecurityBodiesAreLimitedBeforeParsing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, web.Config{})
	const huge = 31 << 20
	// What the client manages to write of a body the server does not read
	// is what fits in the loopback socket buffers (a few MB), not the
	// whole body.
	const unread = 16 << 20
	post := func(c *client, path, contentType string, declared bool) (response, int64) {
		t.Helper()
		body := &countingBody{}
		body.size.Store(huge)
		req, _ := http.NewRequest(http.MethodPost, h.url+path, body)
		req.Header.Set("Content-Type", contentType)
		if declared {
			req.ContentLength = huge
		}
		res, err := c.hc.Do(req)
		if err != nil { // the server may close the connection while the client still writes
			return response{status: -1}, body.read.Load()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return response{status: res.StatusCode, body: string(b)}, body.read.Load()
	}

	t.Run("a 31 MB unauthenticated multipart post with its length is refused with 413 before it is read", func(t *testing.T) {
		res, read := post(h.client(), "/login", "multipart/form-data; boundary=x", true)
		if res.status != http.StatusRequestEntityTooLarge || !strings.Contains(res.body, "over the limit") {
			t.Errorf("= %d %.200s, want 413 with the reason", res.status, res.body)
		}
		if read > unread {
			t.Errorf("the server read %d bytes of a refused body", read)
		}
	})
	t.Run("a 31 MB chunked post is cut at the limit", func(t *testing.T) {
		for _, path := range []string{"/login", "/admin/users", "/api/v1/ingest", "/nosuch"} {
			res, read := post(h.client(), path, "application/x-www-form-urlencoded", false)
			if res.status == http.StatusOK || res.status == http.StatusSeeOther {
				t.Errorf("%s = %d", path, res.status)
			}
			if read > unread {
				t.Errorf("%s: the server read %d bytes of a 31 MB body", path, read)
			}
		}
	})
	t.Run("an oversized incident note is refused before it is read in full", func(t *testing.T) {
		otto := h.login("otto")
		body := &countingBody{}
		body.size.Store(150 << 20)
		req, _ := http.NewRequest(http.MethodPost, h.url+"/incidents/1/notes", body)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-CSRF-Token", otto.csrf())
		res, err := otto.hc.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK || res.StatusCode == http.StatusSeeOther {
				t.Errorf("= %d", res.StatusCode)
			}
		}
		if read := body.read.Load(); read > 4<<20 {
			t.Errorf("the server read %d bytes of a 150 MB note", read)
		}
	})
}
