package cbdash_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

func TestScheduleRulesReadWriteAndFindTheNextDueTime(t *testing.T) {
	// The first Tuesday 10:00 UTC after the test clock's epoch.
	tue := breakertest.Epoch().UTC().Truncate(24 * time.Hour).Add(10 * time.Hour)
	for tue.Weekday() != time.Tuesday || !tue.After(breakertest.Epoch()) {
		tue = tue.AddDate(0, 0, 1)
	}
	at, atPlusOne := tue.Format(time.RFC3339), tue.In(time.FixedZone("", 3600)).Format(time.RFC3339)
	for _, tc := range []struct {
		in, out   string
		after     time.Time
		next      time.Time
		noneAfter bool
	}{
		{"every tue 10:00", "every tue 10:00", tue.Add(-time.Minute), tue, false},
		{"every tue 10:00", "every tue 10:00", tue, tue.AddDate(0, 0, 7), false},
		{"Every THU,tue 10:00", "every tue,thu 10:00", tue, tue.AddDate(0, 0, 2), false},
		{"every day 23:15", "every day 23:15", tue, tue.Add(13*time.Hour + 15*time.Minute), false},
		{"every mon,tue,wed,thu,fri,sat,sun 00:00", "every day 00:00", tue, tue.Add(14 * time.Hour), false},
		{"at " + atPlusOne, "at " + at, tue.Add(-time.Second), tue, false},
		{"at " + at, "at " + at, tue, time.Time{}, true},
	} {
		r, err := cbdash.ParseScheduleRule(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if r.String() != tc.out {
			t.Errorf("%q reads as %q, want %q", tc.in, r.String(), tc.out)
		}
		next, ok := r.Next(tc.after)
		if ok == tc.noneAfter || !next.Equal(tc.next) {
			t.Errorf("%q after %v: next %v (%v), want %v", tc.in, tc.after, next, ok, tc.next)
		}
	}
	for _, bad := range []string{"", "every", "every tue", "every tue 25:00", "every tue 10:0", "every funday 10:00",
		"at tomorrow", "at " + tue.Format(time.DateOnly), "every 2h", "cron 0 10 * * 2"} {
		if _, err := cbdash.ParseScheduleRule(bad); !errors.Is(err, cbdash.ErrInvalid) {
			t.Errorf("%q = %v, want ErrInvalid", bad, err)
		}
	}
}
