package cbdash

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// ScheduleRule says when a scheduled drill runs, always in UTC: once at a
// time (At), or every week on Days at Minute (minutes after midnight). It
// is written, and read (ParseScheduleRule), as the CLI takes it:
//
//	at 2026-12-08T10:00:00Z     once (RFC 3339; converted to UTC)
//	every tue 10:00             every Tuesday at 10:00 UTC
//	every mon,wed,fri 06:30     several weekdays (mon tue wed thu fri sat sun)
//	every day 23:15             every day
//
// In JSON it is that string. Nothing else is read: no time zones, no
// months, no intervals.
type ScheduleRule struct {
	At     time.Time      // a one-off run; zero for a weekly rule
	Days   []time.Weekday // a weekly rule's days, sorted, Sunday = 0
	Minute int            // a weekly rule's time of day, minutes after 00:00 UTC
}

var weekdayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// ParseScheduleRule reads "at RFC3339" or "every DAYS HH:MM" (see
// ScheduleRule). Errors wrap ErrInvalid and quote the input.
func ParseScheduleRule(s string) (ScheduleRule, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: schedule rule %q: %s (for example 'at 2026-12-08T10:00:00Z', 'every tue 10:00', 'every mon,thu 06:30', 'every day 23:15')",
			ErrInvalid, truncate(s, 80), why)
	}
	f := strings.Fields(strings.ToLower(strings.TrimSpace(s)))
	switch {
	case len(f) == 2 && f[0] == "at":
		at, err := time.Parse(time.RFC3339, strings.ToUpper(f[1]))
		if err != nil {
			return ScheduleRule{}, bad("the time is not RFC 3339 (2026-12-08T10:00:00Z)")
		}
		return ScheduleRule{At: at.UTC()}, nil
	case len(f) == 3 && f[0] == "every":
		days, err := parseDays(f[1])
		if err != nil {
			return ScheduleRule{}, bad(err.Error())
		}
		hh, mm, ok := strings.Cut(f[2], ":")
		h, herr := strconv.Atoi(hh)
		m, merr := strconv.Atoi(mm)
		if !ok || len(hh) != 2 || len(mm) != 2 || herr != nil || merr != nil || h < 0 || h > 23 || m < 0 || m > 59 {
			return ScheduleRule{}, bad("the time of day is not HH:MM (UTC, 00:00 to 23:59)")
		}
		return ScheduleRule{Days: days, Minute: h*60 + m}, nil
	}
	return ScheduleRule{}, bad("it is neither 'at TIME' nor 'every DAYS HH:MM'")
}

func parseDays(s string) ([]time.Weekday, error) {
	if s == "day" {
		return []time.Weekday{0, 1, 2, 3, 4, 5, 6}, nil
	}
	var days []time.Weekday
	for name := range strings.SplitSeq(s, ",") {
		i := slices.Index(weekdayNames, name)
		if i < 0 {
			return nil, fmt.Errorf("day %q is not one of %s or day", truncate(name, 20), strings.Join(weekdayNames, " "))
		}
		if !slices.Contains(days, time.Weekday(i)) {
			days = append(days, time.Weekday(i))
		}
	}
	slices.Sort(days)
	return days, nil
}

// Once reports whether the rule is a one-off run.
func (r ScheduleRule) Once() bool { return !r.At.IsZero() }

// Validate checks the rule (one of At or Days; Minute within a day);
// errors wrap ErrInvalid.
func (r ScheduleRule) Validate() error {
	switch {
	case r.Once() && len(r.Days) > 0:
		return fmt.Errorf("%w: schedule rule: a one-off time or weekdays, not both", ErrInvalid)
	case !r.Once() && len(r.Days) == 0:
		return fmt.Errorf("%w: schedule rule is required ('at TIME' or 'every DAYS HH:MM')", ErrInvalid)
	case r.Minute < 0 || r.Minute >= 24*60:
		return fmt.Errorf("%w: schedule rule: the time of day must be within 00:00..23:59", ErrInvalid)
	}
	for _, d := range r.Days {
		if d < time.Sunday || d > time.Saturday {
			return fmt.Errorf("%w: schedule rule: bad weekday %d", ErrInvalid, d)
		}
	}
	return nil
}

// Next returns the rule's first due time strictly after t; ok is false
// when there is none (a one-off time at or before t).
func (r ScheduleRule) Next(t time.Time) (due time.Time, ok bool) {
	if r.Once() && r.At.After(t) {
		return r.At, true
	}
	if r.Once() || len(r.Days) == 0 {
		return time.Time{}, false
	}
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	for i := range 8 {
		d := day.AddDate(0, 0, i)
		due = d.Add(time.Duration(r.Minute) * time.Minute)
		if slices.Contains(r.Days, d.Weekday()) && due.After(t) {
			return due, true
		}
	}
	return time.Time{}, false
}

// String writes the rule as ParseScheduleRule reads it.
func (r ScheduleRule) String() string {
	if r.Once() {
		return "at " + r.At.UTC().Format(time.RFC3339)
	}
	if len(r.Days) == 0 {
		return ""
	}
	days := "day"
	if len(r.Days) < 7 {
		names := make([]string, len(r.Days))
		for i, d := range r.Days {
			names[i] = weekdayNames[d]
		}
		days = strings.Join(names, ",")
	}
	return fmt.Sprintf("every %s %02d:%02d", days, r.Minute/60, r.Minute%60)
}

// MarshalText writes String.
func (r ScheduleRule) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads ParseScheduleRule's form.
func (r *ScheduleRule) UnmarshalText(b []byte) error {
	v, err := ParseScheduleRule(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// ScheduleRequest is what an operator asks for when scheduling a drill:
// the hold each run creates, as a manual drill takes it (its TTL is each
// run's duration, its Actor who created the schedule), and when it runs.
type ScheduleRequest struct {
	HoldRequest
	Rule ScheduleRule `json:"rule"`
}

// Validate checks the request as HoldRequest.Validate does (maxHold 0 =
// DefaultMaxHold), and that the action is force_open and the rule is
// set; errors wrap ErrInvalid and name the field.
func (r ScheduleRequest) Validate(maxHold time.Duration) error {
	if r.Action != protocol.ActionForceOpen {
		return fmt.Errorf("%w: a scheduled drill's action is force_open, not %q", ErrInvalid, truncate(r.Action, 40))
	}
	if err := r.HoldRequest.Validate(maxHold); err != nil {
		return err
	}
	return r.Rule.Validate()
}

// DrillSchedule is a stored schedule of drills. Like a hold it is never
// deleted from the store: deleting it records who, when and why.
type DrillSchedule struct {
	ID string `json:"id"`
	ScheduleRequest
	CreatedAt time.Time `json:"created_at"`
	// Deleted* are set once an operator deleted (unscheduled) it.
	DeletedAt    time.Time `json:"deleted_at,omitzero"`
	DeletedBy    string    `json:"deleted_by,omitempty"`
	DeleteReason string    `json:"delete_reason,omitempty"`
	// NextRun is the next due time (NextRunAfter); absent when there is
	// none (a one-off already run or skipped, a deleted schedule).
	NextRun time.Time `json:"next_run,omitzero"`
	// Runs is the last runs, newest first (started or skipped).
	Runs []ScheduleRun `json:"runs"`
}

// MarshalJSON adds "ttl_ms" (each run's duration in milliseconds; "ttl"
// is nanoseconds) to the schedule's fields.
func (s DrillSchedule) MarshalJSON() ([]byte, error) {
	type plain DrillSchedule // without this method
	return json.Marshal(struct {
		plain
		TTLMillis int64 `json:"ttl_ms"`
	}{plain(s), s.TTL.Milliseconds()})
}

// NextRunAfter is the schedule's next due time after its last run (or its
// creation), none (ok false) once deleted or when the rule has no more.
func (s DrillSchedule) NextRunAfter() (time.Time, bool) {
	if !s.DeletedAt.IsZero() {
		return time.Time{}, false
	}
	return s.Rule.Next(s.LastHandled())
}

// LastHandled is the due time of the schedule's last run, or its creation
// when it has none: due times after it are yet to run.
func (s DrillSchedule) LastHandled() time.Time {
	from := s.CreatedAt
	if len(s.Runs) > 0 && s.Runs[0].Due.After(from) {
		from = s.Runs[0].Due
	}
	return from
}

// Schedule run results (ScheduleRun.Result).
const (
	RunClaimed = "claimed" // a collector took the run and has not said how it went (it stopped meanwhile)
	RunStarted = "started" // the drill started as hold HoldID
	RunSkipped = "skipped" // not started: Reason says why (pre-flight, missed while the server was down)
)

// ScheduleRun is one due time of a schedule, taken by one collector
// (the store keeps one per schedule and due time).
type ScheduleRun struct {
	ScheduleID string    `json:"schedule_id"`
	Due        time.Time `json:"due"`
	At         time.Time `json:"at"` // when it was taken
	Result     string    `json:"result"`
	HoldID     string    `json:"hold_id,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	// ClaimedBy is the collector (cluster node) that took the run last.
	ClaimedBy string `json:"claimed_by,omitempty"`
	// TakenOverFrom, when set, is the collector that claimed the run
	// first and did not finish it within the lease (it stopped): ClaimedBy
	// took it over.
	TakenOverFrom string `json:"taken_over_from,omitempty"`
}

// Text is the run in one line, as the CLI and the holds page list it:
// "2026-12-08 10:00 started as hold h…", "… skipped: pre-flight: …",
// with ", taken over from NODE" when another collector finished it.
func (r ScheduleRun) Text() string {
	s := r.Due.UTC().Format("2006-01-02 15:04") + " " + r.Result
	switch r.Result {
	case RunStarted:
		s += " as hold " + r.HoldID
	case RunSkipped:
		s += ": " + r.Reason
	}
	switch {
	case r.TakenOverFrom != "":
		s += " (taken over by " + r.ClaimedBy + " from " + r.TakenOverFrom + ", which stopped before finishing it)"
	case r.Result == RunClaimed && r.ClaimedBy != "":
		s += " (claimed by " + r.ClaimedBy + ")"
	}
	return s
}

// ScheduleQuery selects schedules, newest first.
type ScheduleQuery struct {
	// Deleted keeps deleted schedules too (the audit trail).
	Deleted bool
	// Runs is how many of each schedule's last runs to load; 0 = 5.
	Runs  int
	Limit int // 0 = 200
}
