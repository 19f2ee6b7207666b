package templates

// HoldRow is one hold in the holds list or on a dependency page.
type HoldRow struct {
	ID       string
	Href     string // the drill report
	Action   string // "force open" / "force closed"
	Selector string // "*/payments region=eu share=50%"
	Actor    string
	Reason   string
	Start    string // to the second, UTC
	// Expiry is the planned end to the second, with what remains or how
	// it ended: "2025-01-02 14:05:09 (in 9m 51s)", "... (released 14:01:02 by otto)".
	Expiry string
	// Until and In are set while the hold is live: the planned end (to
	// the second, UTC; ISO RFC 3339 for the page's clock) and what
	// remains, which the page counts down; Expiry is then not shown.
	Until, UntilISO, In string
	Status              State  // live (forced-open / forced-closed), released or expired (closed)
	Coverage            string // "3 instances (1 joined later): 3 applied"
	// Governs lists the instances this hold decides now (dependency page
	// only): where several holds match, the most recent wins.
	Governs string
}

// Holds is the holds list page.
type Holds struct {
	Page     Page
	Rows     []HoldRow
	Fragment string // URL the list refreshes itself from
	MaxHold  string // "24h0m0s"
	// Schedules is the drill schedules not deleted, newest first; nil
	// when the server keeps none.
	Schedules []ScheduleRow
}

// ScheduleRow is one drill schedule on the holds page.
type ScheduleRow struct {
	ID       string
	Selector string // what each run forces open
	Rule     string // "every tue 10:00" (UTC)
	For      string // each run's duration: "10m"
	Stops    string // "fallback-failure-rate>20%", "" for none
	NextRun  string // to the minute, UTC; "none"
	LastRun  string // "2026-12-08 10:00 started as hold h…", "… skipped: pre-flight: …", "never"
	LastHref string // the last run's drill report; "" when none
	Actor    string
	Reason   string
}

// DepHolds is the holds block of a dependency page: the live holds that
// cover it (with the instances each governs) and its past holds, and the
// fleet-wide hold form for operators.
type DepHolds struct {
	Current []HoldRow
	Past    []HoldRow
	Form    *HoldForm // nil when the user may not operate or holds are not available
	// Unsupported says why holds are not available for this dependency
	// ("a sony/gobreaker v2 breaker cannot be held open or closed"); ""
	// when they are.
	Unsupported string
	// Partly names the instances that cannot be held when others can.
	Partly string
}

// HoldForm is the fleet-wide hold form: it posts to /holds/confirm, which
// shows the blast radius before anything is done.
type HoldForm struct {
	CSRF       string
	Service    string
	Breaker    string
	DefaultTTL int    // minutes
	MaxHold    string // "24h", said beside the expiry
	MaxTTL     int    // the longest expiry offered, in minutes (--max-hold)
	// DefaultStops is the server's default stop conditions, as the CLI
	// writes them, comma-separated ("" = none).
	DefaultStops string
}

// HoldConfirm is the confirmation step of a fleet-wide hold: the request
// as hidden fields, and the blast radius from a dry run, or the error
// that refuses it.
type HoldConfirm struct {
	Page   Page
	Fields []Field // the form as posted, to post again
	Title  string  // "force open */payments"
	Blast  []string
	Error  string // when set, the hold cannot be created as asked
	Back   string
	// Action is where the confirmation posts ("" = /holds, a hold now;
	// /holds/schedule for a scheduled drill); Button its button's text
	// ("" = "Yes, hold them").
	Action, Button string
}

// Field is a hidden form field.
type Field struct{ Name, Value string }

// HoldInstanceRow is one covered instance breaker in a drill report.
type HoldInstanceRow struct {
	Instance   string // "service/instance"
	Breaker    string
	Covered    string
	JoinedLate bool
	Answer     string
	AnswerOK   bool
	HoldPeriodView
}

// HoldPeriodView is what breakers counted over a period, in words.
type HoldPeriodView struct {
	Calls, Rejected, FallbacksServed, FallbacksFailed string
	ErrorRate, P50, P99                               string
}

// HoldDependencyRow compares a dependency before and during a hold.
type HoldDependencyRow struct {
	Dependency string
	Href       string
	Before     HoldPeriodView
	During     HoldPeriodView
}

// HoldReport is the drill report page of one hold.
type HoldReport struct {
	Page         Page
	ID           string
	Title        string // "force open */payments"
	Status       State
	Summary      []SummaryItem
	Instances    []HoldInstanceRow
	Total        HoldPeriodView
	Dependencies []HoldDependencyRow
	ExportMD     string
	ExportJSON   string
	// Release is the release form's action when the hold is live and the
	// user may operate; "" otherwise.
	Release string
}
