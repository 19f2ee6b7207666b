package web_test

// /live at fleet scale (issue 27, item 4): at 10,000 dependencies a live
// overview sends one page of tiles, the one its client asked for, and a
// socket whose client does not read holds at most one message.

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/web"
)

// liveMessageBound is the most a live overview message may weigh at any
// fleet size: one page of tiles (web.TilesPerPage, 1.5-3.5 KB each with
// the test's names) and the counters. The whole fleet's tiles were
// 14.8 MB at 10,000 dependencies.
const liveMessageBound = 256 << 10

// tileNames lists the tiles of an overview message or page, in order,
// as service/breaker.
func tileNames(html string) []string {
	var out []string
	for _, m := range tileName.FindAllStringSubmatch(html, -1) {
		out = append(out, m[1]+"/"+m[2])
	}
	return out
}

var tileName = regexp.MustCompile(`<a class="name" href="/dependency\?service=([^&"]+)&amp;breaker=([^"]+)" title=`)

// bigOrder is the fleet's tiles worst first: the open ones, then the
// closed ones, each by service and breaker name.
func bigOrder(open map[string]bool) []string {
	var first, rest []string
	for i := range bigServices {
		for b := range bigBreakers {
			name := bigService(i) + "/b" + strconv.Itoa(b)
			if open[name] {
				first = append(first, name)
			} else {
				rest = append(rest, name)
			}
		}
	}
	sort.Strings(first)
	sort.Strings(rest)
	return append(first, rest...)
}

func TestLiveOverviewAtFleetScaleSendsThePageAskedFor(t *testing.T) {
	t.Parallel()
	h := newLimitedHarness(t, web.Config{}, collector.Limits{MaxDependencies: 20000})
	f := newBigFleet(h)
	if err := f.report(13, nil, append(f.flip(13, 7), f.flip(13, 400)...)); err != nil {
		t.Fatal(err)
	}
	want := bigOrder(map[string]bool{"s13/b7": true, "s13/b400": true})
	vera := h.login("vera")
	ctx := t.Context()

	sock := vera.live(ctx, "view=overview")
	first := sock.next(`id="groups-inner"`)
	t.Logf("first message: %d bytes", len(first))
	if len(first) > liveMessageBound {
		t.Fatalf("the first message is %d bytes, over %d", len(first), liveMessageBound)
	}
	if got := tileNames(first); !slices.Equal(got, want[:web.TilesPerPage]) {
		t.Fatalf("the first message has %d tiles, %.5q..., want the first page of the worst-first order %.5q...", len(got), got, want)
	}
	if !strings.Contains(first, "tiles 1-50 of 10000") || !strings.Contains(first, `id="fleet"`) {
		t.Errorf("the first message lacks the pager or the counters")
	}
	page := vera.get("/")
	if page.status != http.StatusOK || len(page.body) > 2*liveMessageBound {
		t.Fatalf("overview page: %d, %d bytes", page.status, len(page.body))
	}
	if got := tileNames(page.body); !slices.Equal(got, want[:web.TilesPerPage]) {
		t.Errorf("the page shows %.5q..., not the socket's page", got)
	}
	if !strings.Contains(page.body, `ws-connect="/live?view=overview"`) || !strings.Contains(page.body, `href="/?page=2"`) {
		t.Errorf("the page lacks its socket or the link to page 2")
	}

	t.Run("another page", func(t *testing.T) {
		msg := vera.live(ctx, "view=overview&page=3").next(`id="groups-inner"`)
		if got := tileNames(msg); !slices.Equal(got, want[100:150]) {
			t.Errorf("page 3: %.5q..., want %.5q...", got, want[100:150])
		}
		if !strings.Contains(msg, "tiles 101-150 of 10000") || !strings.Contains(msg, `href="/?page=2"`) || !strings.Contains(msg, `href="/?page=4"`) {
			t.Errorf("page 3's pager: %s", regexp.MustCompile(`(?s)<nav id="tile-pager".*?</nav>`).FindString(msg))
		}
	})
	t.Run("a filter and a page", func(t *testing.T) {
		var s05 []string
		for b := range bigBreakers {
			s05 = append(s05, "s05/b"+strconv.Itoa(b))
		}
		sort.Strings(s05)
		msg := vera.live(ctx, "view=overview&service=s05&sort=name&page=2").next(`id="groups-inner"`)
		if got := tileNames(msg); !slices.Equal(got, s05[50:100]) {
			t.Errorf("s05 by name, page 2: %.5q..., want %.5q...", got, s05[50:100])
		}
		if !strings.Contains(msg, "tiles 51-100 of 500") {
			t.Error("the pager does not count s05's tiles")
		}
		if len(msg) > liveMessageBound {
			t.Errorf("%d bytes", len(msg))
		}
	})
	t.Run("a tile that moves onto the page sends the page again", func(t *testing.T) {
		if err := f.report(19, nil, f.flip(19, 499)); err != nil {
			t.Fatal(err)
		}
		msg := sock.next(`id="groups-inner"`)
		want := bigOrder(map[string]bool{"s13/b7": true, "s13/b400": true, "s19/b499": true})
		if got := tileNames(msg); !slices.Equal(got, want[:web.TilesPerPage]) {
			t.Errorf("after s19/b499 opened: %.5q..., want %.5q...", got, want)
		}
		if len(msg) > liveMessageBound {
			t.Errorf("%d bytes", len(msg))
		}
	})
}

// TestLiveSocketThatDoesNotReadHoldsOneMessage has a client that stops
// reading while the first page's tiles change at every live interval:
// the server's socket holds at most one message (queued bytes under
// liveMessageBound), puts off its flushes while its write waits, and
// when the client reads again it gets the latest state (or, when its
// write had waited for longer than the write timeout, is closed).
func TestLiveSocketThatDoesNotReadHoldsOneMessage(t *testing.T) {
	t.Parallel()
	h := newLimitedHarness(t, web.Config{}, collector.Limits{MaxDependencies: 20000})
	f := newBigFleet(h)
	vera := h.login("vera")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Control: smallReceiveBuffer}).DialContext}}
	hdr := cookieHeader(vera, http.Header{})
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/live?view=overview", &websocket.DialOptions{HTTPClient: hc, HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(-1)

	// Every breaker of s00 (the first page: all closed, by name) reports
	// new calls, and the clock moves on a live interval, until the socket
	// has put off 20 flushes (its write waits for the client), or the
	// server closed it.
	base := h.srv.LiveCoalesced()
	var rounds int
	for ; h.srv.LiveCoalesced()-base < 20 && h.srv.LiveSockets() > 0; rounds++ {
		if rounds == 3000 || ctx.Err() != nil {
			t.Fatalf("after %d rounds the socket has put off %d flushes", rounds, h.srv.LiveCoalesced()-base)
		}
		if err := f.report(0, f.windows(0, 0, bigBreakers, rounds), nil); err != nil {
			t.Fatal(err)
		}
		h.tick()
		if _, peak := h.srv.LiveQueued(); peak > liveMessageBound {
			t.Fatalf("round %d: %d bytes queued for the socket, over %d", rounds, peak, liveMessageBound)
		}
	}
	_, peak := h.srv.LiveQueued()
	t.Logf("%d rounds, %d flushes put off; at most %d bytes queued", rounds, h.srv.LiveCoalesced()-base, peak)
	if h.srv.LiveCoalesced() == base {
		t.Fatal("the server closed the socket before it fell behind")
	}

	// s00/b0 opens, then the client reads: the latest state reaches it.
	if err := f.report(0, nil, f.flip(0, 0)); err != nil {
		t.Fatal(err)
	}
	msgs, end := make(chan string, 16), make(chan error, 1)
	go func() {
		for {
			_, msg, err := conn.Read(ctx)
			if err != nil {
				end <- err
				return
			}
			msgs <- string(msg)
		}
	}()
	opened := regexp.MustCompile(`data-state="open">\s*<header>\s*<a class="name" href="/dependency\?service=s00&amp;breaker=b0"`)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case msg := <-msgs:
			if len(msg) > liveMessageBound {
				t.Fatalf("a message of %d bytes", len(msg))
			}
			if opened.MatchString(msg) {
				t.Log("reading again, the client got the latest state")
				return
			}
		case err := <-end:
			// Its write waited longer than the write timeout: the server
			// closed the socket, and gave its slot back.
			t.Logf("the server closed the socket: %v", err)
			for h.srv.LiveSockets() > 0 {
				select {
				case <-ctx.Done():
					t.Fatal("the closed socket still counts")
				case <-tick.C:
				}
			}
			return
		case <-tick.C:
			h.tick()
		case <-ctx.Done():
			t.Fatal("neither the latest state nor the end of the socket")
		}
	}
}
