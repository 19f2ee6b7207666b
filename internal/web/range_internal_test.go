package web

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
)

func TestSpans(t *testing.T) {
	t.Parallel()
	now := clocktest.Epoch().Truncate(time.Minute).Add(30 * time.Second)
	at := func(d time.Duration) string { return now.Add(d).UTC().Format(customTime) }
	for _, tc := range []struct {
		name       string
		q          url.Values
		from, to   time.Time
		endsNow    bool
		err        string
		liveParams string
	}{
		{"the default preset", url.Values{}, now.Add(-time.Hour), now, true, "", "range=1h"},
		{"a preset ending at a time", url.Values{"range": {"15m"}, "end": {"1000"}}, time.Unix(100, 0), time.Unix(1000, 0), false, "", "end=1000&range=15m"},
		{"a custom range", url.Values{"from": {at(-3 * time.Hour)}, "to": {at(-time.Hour)}},
			now.Add(-3 * time.Hour).Truncate(time.Minute), now.Add(-time.Hour).Truncate(time.Minute), false, "", "from=" + url.QueryEscape(at(-3*time.Hour)) + "&to=" + url.QueryEscape(at(-time.Hour))},
		{"a custom range until now", url.Values{"from": {at(-3 * time.Hour)}}, now.Add(-3 * time.Hour).Truncate(time.Minute), now, true, "", "from=" + url.QueryEscape(at(-3*time.Hour))},
		{"from after to", url.Values{"from": {at(0)}, "to": {at(-time.Hour)}}, time.Time{}, time.Time{}, false, "from must be before to", ""},
		{"a bad from names it", url.Values{"from": {"yesterday"}}, time.Time{}, time.Time{}, false, "from must be a UTC time", ""},
		{"longer than 30 days", url.Values{"from": {at(-31 * 24 * time.Hour)}}, time.Time{}, time.Time{}, false, "30 days", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp, err := parseSpan(tc.q, "1h", now)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sp.from.Equal(tc.from) || !sp.to.Equal(tc.to) || sp.endsNow() != tc.endsNow || sp.values().Encode() != tc.liveParams {
				t.Fatalf("span %s..%s ends now %v params %q; want %s..%s %v %q", sp.from, sp.to, sp.endsNow(), sp.values().Encode(), tc.from, tc.to, tc.endsNow, tc.liveParams)
			}
			// A range ending now moves with the clock, keeping its length
			// (a preset) or its start (a custom range).
			later := sp.at(now.Add(time.Minute))
			if tc.endsNow && (!later.to.Equal(now.Add(time.Minute)) || (tc.q.Get("from") == "") != later.from.Equal(sp.from.Add(time.Minute))) {
				t.Errorf("a minute later: %s..%s", later.from, later.to)
			}
		})
	}
}

func TestTheDefaultRangeStartsAtTheData(t *testing.T) {
	t.Parallel()
	now := clocktest.Epoch().Truncate(time.Minute)
	sp, _ := parseSpan(url.Values{}, "1h", now)
	pts := []cbdash.Point{{At: now.Add(-12*time.Minute + 7*time.Second)}, {At: now.Add(-time.Minute)}}
	got := sp.startAtData(pts)
	if !got.from.Equal(now.Add(-12*time.Minute)) || !got.to.Equal(now) || !got.endsNow() || got.values().Get("from") == "" {
		t.Fatalf("12 minutes of data in an hour: %s..%s (%v), want from the first data's minute until now", got.from, got.to, got.values())
	}
	if full := sp.startAtData([]cbdash.Point{{At: now.Add(-58 * time.Minute)}}); !full.from.Equal(sp.from) {
		t.Errorf("data over the whole range: the range moved to %s", full.from)
	}
	if none := sp.startAtData(nil); !none.from.Equal(sp.from) {
		t.Errorf("no data: the range moved to %s", none.from)
	}
}
