// Package templates holds the templ components of the cbdash dashboard
// and the view models they render. Components never reach the database
// or the collector: handlers in internal/web build a view model and pass
// it in. A page and its live fragments come from the same components, so
// what the websocket pushes is byte for byte what a reload would show.
//
// View models are plain values; rendering them is safe for concurrent
// use. Every text is escaped by templ, so names such as
// "<script>alert(1)</script>" are shown as text.
package templates

import "strings"

// Page is what the layout needs: title, who is logged in, the CSRF token
// for forms and the live websocket URL of the page ("" = not live).
type Page struct {
	Title   string
	Nav     string // active navigation item: "overview", "timeline", "audit", "admin"
	User    string // "" when not logged in
	Role    string
	CanOp   bool   // operator or admin
	IsAdmin bool   // admin
	Anon    bool   // anonymous read-only viewing
	CSRF    string // token for the _csrf form field
	LiveURL string // path and query of the page's websocket
	// Now is the server's clock at render (RFC 3339): the page's script
	// ticks relative times from it, not from the browser's clock.
	Now string
}

// State is a breaker state shown in colour and in words.
type State struct {
	Class string // CSS modifier: closed, open, half-open, forced-open, forced-closed, none
	Text  string // words: "closed", "open", "half-open", "forced open", ...
}

// Hold is the "held by X until T" badge.
type Hold struct {
	Action   string // "forced open" / "forced closed"
	Actor    string
	Reason   string
	Until    string // "14:05:09 UTC"; "" = no expiry
	In       string // time left, "11m52s", ticking from UntilISO in the page
	UntilISO string // RFC 3339, for data-until
	HoldID   string // the stored hold; "" for a command of its own
	Href     string // the hold's drill report; "" for a command of its own
}

// Since is a moment shown as clock time and how long ago it was ("open
// since 10:02:11 UTC (3m12s)"); the page's script keeps For ticking from
// ISO (data-since), so it is right without a live update.
type Since struct {
	Label string // "open since", "forced open since"
	Clock string // "10:02:11 UTC"
	For   string // "3m12s"
	ISO   string // RFC 3339 with milliseconds, for data-since and <time datetime>
}

// Rate is a rate beside its threshold, drawn as a headroom bar.
type Rate struct {
	Label     string  // "failure rate"
	Value     float64 // percent
	Big       string  // the value alone, "12%", or "–" while not judged
	Threshold float64 // percent; 0 = no threshold (slow-call detection off)
	Text      string  // "12.0% of 50%"
	Fill      float64 // bar fill 0..100 (Value/Threshold)
	Level     string  // ok, warn, bad; idle while not judged (below the minimum calls)
}

// Spark is a 10-minute sparkline in 10-second buckets: polyline points
// in a 100x24 viewBox, one line each for admitted, failed and rejected
// calls, on one scale.
type Spark struct {
	Admitted string // points of admitted calls per bucket
	Failed   string // points of failed calls (among the admitted)
	Rejected string // points of rejected calls
	Peak     string // the scale's top: "250 per 10 s"
	Title    string // tooltip with the totals
	Empty    bool
}

// Tile is one dependency on the overview.
type Tile struct {
	ID        string // stable element id
	Service   string
	Breaker   string
	Href      string
	State     State
	Instances string // "open on 2 of 6"
	Stale     string // "1 stale" or ""
	OpenSince *Since // nil while closed
	Admitted  string // admitted calls per second, last minute: "12.3/s"
	Rejected  string // rejected calls per second, last minute
	Fallbacks string // "120 served, 3 failed" in the last minute; "" when none
	Failure   Rate
	Slow      Rate
	// SlowLeads is true when the slow-call rate tripped the breaker: it
	// is then the tile's large figure instead of the failure rate.
	SlowLeads  bool
	P99        string
	Spark      Spark
	OpensToday int
	Held       *Hold
	Labels     []string // "key=value"
	// FallbackLast says when the fallbacks last served rejected calls and
	// how well ("12m ago: 86 % served"), or that they never did.
	FallbackLast string
}

// Fleet are the counters on top of the overview.
type Fleet struct {
	Dependencies int
	Open         int
	HalfOpen     int
	Forced       int
	StaleInst    int
	// FallbackNever counts the dependencies whose fallbacks have not
	// served a rejected call since the collector started.
	FallbackNever int
}

// Option is a choice in a select.
type Option struct {
	Value, Text string
	Selected    bool
}

// Filter is the overview's filter form as submitted.
type Filter struct {
	Service  string
	State    string
	Label    string
	Q        string
	Sort     string
	Group    bool
	Services []Option
	States   []Option
	Sorts    []Option
}

// Group is a titled set of tiles ("" title = ungrouped).
type Group struct {
	Title string
	Tiles []Tile
}

func tileIDs(gs []Group) string {
	var ids []string
	for _, g := range gs {
		for _, t := range g.Tiles {
			ids = append(ids, t.ID)
		}
	}
	return strings.Join(ids, " ")
}

// TileIDs is the order of the tiles of gs, as TileOrder takes it.
func TileIDs(gs []Group) string { return tileIDs(gs) }

// Overview is the overview page.
type Overview struct {
	Page  Page
	Fleet Fleet
	// Alerts is the firing count; nil when the server evaluates no alerts.
	Alerts *AlertsCount
	// FleetTimeline is the last hour's line of what was not closed; nil
	// when the server keeps no per-instance history.
	FleetTimeline *FleetTimeline
	Filter        Filter
	Groups        []Group
	// Pager says which page of tiles Groups is when there are more
	// than fit a page; its zero value when there are not.
	Pager TilePager
	Shown int // tiles shown after filtering
	Total int
}

// TilePager is the line that says which of the overview's tiles are
// shown ("tiles 101-200 of 9,000"), with links to the pages beside
// ("" where there is none). Its zero value draws nothing.
type TilePager struct {
	Showing            string
	PrevHref, NextHref string
}

// Tick is an axis tick: position in viewBox units and its label.
type Tick struct {
	Pos   float64
	Label string
}

// Series is one line of a chart, already projected to viewBox units.
type Series struct {
	Name  string
	Class string   // CSS class that colours the line (c1..c6)
	Parts []string // polyline points "x,y x,y ...", one per stretch without a gap
}

// Threshold is a horizontal threshold line.
type Threshold struct {
	Y     float64
	Label string
	Class string // t2 failure, t3 slow call, t0 both (colour and dashes)
}

// HoverCol is an invisible column over one bucket whose title element is
// the tooltip with every series' value at that time.
type HoverCol struct {
	X, W  float64
	Title string
}

// Chart is a server-rendered SVG line chart; internal/web computes the
// geometry, the component only draws it.
type Chart struct {
	ID                       string
	Title                    string
	Unit                     string // y axis unit, shown beside the title
	W, H                     float64
	Left, Right, Top, Bottom float64 // plot area in viewBox units
	XTicks                   []Tick
	YTicks                   []Tick
	Series                   []Series
	Thresholds               []Threshold
	Hover                    []HoverCol
	Empty                    bool
	// Gaps are times whose data an agent dropped under memory pressure:
	// drawn as hatched bands labelled "data lost", not as a dip to zero.
	Gaps []GapBand
}

// GapBand is one "data lost" band of a chart, in viewBox units.
type GapBand struct {
	X, W  float64
	Title string // what was lost: instances, calls, time
}

// InstanceTable is one page of a dependency's instance table.
type InstanceTable struct {
	Rows    []InstanceRow
	Total   int    // instances of the dependency
	Showing string // "1-50 of 1000 instances, ..."; "" when there are none
	// Links to the previous and next page, to all instances, and (when
	// all are shown) back to the first page; "" when there is none.
	PrevHref, NextHref, AllHref, FirstHref string
}

// InstanceRow is one instance of a dependency.
type InstanceRow struct {
	Instance       string
	State          State
	Stale          bool
	Admitted       string // admitted calls per second in the last window report
	Rejected       string // rejected calls per second in the last window report
	Failure        string
	Slow           string
	LastTransition *Since // nil = never; shown as "7s ago", ticking
	OpenSince      *Since // nil while closed
	LastSeen       *Since // nil = never
	Config         string
	ConfigDiffers  bool
	// ConfigDrift names the settings that differ from most instances'
	// ("timeout 2s vs 1s on 3 others"); "" when none does.
	ConfigDrift string
	Held        *Hold
	// Sampled, when not "", says that the state is sampled by a source
	// (a Hystrix stream, a Prometheus scrape), not pushed, and what that
	// means; the row then shows a "sampled" marker with it as its title.
	Sampled string
	// Estimated, when not "", says that the counts are estimated (a
	// Hystrix stream's rolling counts) and how; the row then shows an
	// "estimated" marker with it as its title.
	Estimated string
	// Hosts, when not "", says the instance stands for a cluster's hosts
	// (a Turbine stream): "cluster of 2 hosts, 1 open".
	Hosts string
	// Elsewhere, when not "", says that the instance is served by another
	// collector and what that means; the row then shows an "on another
	// collector" marker with it as its title, and its admitted, rejected
	// and rate cells left "" (known only there) "–" with it as their
	// title.
	Elsewhere string
}

// TransitionRow is one line of the transition log.
type TransitionRow struct {
	At       string
	Instance string
	From, To State
	Cause    string
	// Shadow is, for a would-be transition of a shadow configuration
	// (never enforced), its name; "" for a live transition.
	Shadow string
}

// TargetRow is one instance's result of a command.
type TargetRow struct {
	Instance string
	Status   string // pending, applied, failed, expired
	State    string
	Error    string
	At       string
}

// CommandView is one operator command with its result per instance.
type CommandView struct {
	ID       string // element id
	IssuedAt string
	Actor    string
	Action   string
	Service  string
	Breaker  string
	Href     string
	Scope    string
	Expires  string
	// UntilISO and In are set while a forced state is still to end: its
	// end (RFC 3339) and what remains, which the page counts down.
	UntilISO, In string
	Reason       string
	Summary      string // "2 applied, 1 pending"
	Targets      []TargetRow
	HoldHref     string // the drill report of the hold the command applied or released; "" if none
}

// DepHeader is the live summary at the top of a dependency page.
type DepHeader struct {
	State      State
	Instances  string
	Stale      string
	OpenSince  *Since // nil while closed
	Held       *Hold
	Admitted   string // admitted calls per second, last minute
	Rejected   string // rejected calls per second, last minute
	Fallbacks  string // "120 served, 3 failed" in the last minute; "" when none
	Failure    Rate
	Slow       Rate
	P50, P99   string
	OpensToday int
	Labels     []string
	// FallbackLast is as Tile's.
	FallbackLast string
}

// OperatorForm is the operator panel of a dependency page.
type OperatorForm struct {
	CSRF       string
	Service    string
	Breaker    string
	Instances  []Option
	Live       int
	DefaultTTL int // minutes
	// MaxTTL is the longest expiry offered, in minutes: the server's
	// --max-hold (a force is a hold); MaxHold says it in words ("24h").
	MaxTTL  int
	MaxHold string
	// View are the page's range parameters (Text = name): hidden fields
	// that bring the page back on its range after the command.
	View []Option
	// Unsupported says why no instance's breaker can be held ("a
	// sony/gobreaker v2 breaker cannot be held open or closed"): the panel
	// says so instead of offering the commands.
	Unsupported string
	// DefaultStops is the server's default stop conditions (--stop-if),
	// as the CLI writes them; "" = none.
	DefaultStops string
}

// Dependency is the dependency page.
type Dependency struct {
	Page      Page
	Service   string
	Breaker   string
	Header    DepHeader
	Ranges    []Link
	RangeText string
	// Misuse is the number of calls ended twice (a service bug the
	// breaker ignored) in the range, summed over instances; shown when
	// not 0.
	Misuse      int64
	Custom      CustomRange
	Charts      []Chart
	Instances   InstanceTable
	Transitions []TransitionRow
	Commands    []CommandView
	Operator    *OperatorForm // nil when the user may not operate
	Holds       *DepHolds     // nil when the server keeps no holds
	// Heatmap is the instances against time; nil when the server keeps
	// no per-instance history.
	Heatmap   *Heatmap
	AuditHref string
	Tune      *TunePanel // the Tune panel (tune.templ)
	// Shadows are the shadow configurations' lanes; nil when the
	// breaker has none.
	Shadows *ShadowLanes
}

// Link is a navigation link, possibly the current one.
type Link struct {
	Href, Text string
	Current    bool
}

// Confirm is the confirmation step of an operator command: the request
// as hidden fields and its blast radius in words.
type Confirm struct {
	Page     Page
	Service  string
	Breaker  string
	Action   string
	Scope    string
	Instance string
	Share    string
	TTL      string
	Reason   string
	Blast    string
	Back     string
	View     []Option // the dependency page's range, carried to the command (Text = name)
}

// CustomRange is the from/to form beside the range presets: UTC times as
// the datetime-local input takes them; To "" = until now.
type CustomRange struct {
	Action   string
	From, To string
	Current  bool     // the page shows a custom range
	Hidden   []Option // the page's other parameters (Text = name)
}

// Audit is the audit log page.
type Audit struct {
	Page     Page
	Service  string
	Commands []CommandView
}

// Segment is a stretch of one lane of the timeline in one state.
type Segment struct {
	X, W  float64
	Class string // open, half-open, forced-open, forced-closed
	Title string
	Href  string
}

// Lane is one dependency on the timeline.
type Lane struct {
	Title    string
	Href     string
	Segments []Segment
}

// Lane geometry of the timeline, viewBox units.
const (
	LaneTop  = 20.0
	LaneStep = 22.0
)

func laneY(i int) float64 { return LaneTop + float64(i)*LaneStep }

// Timeline is the fleet timeline page.
type Timeline struct {
	Page      Page
	Service   string
	Services  []Option
	Ranges    []Link
	RangeText string
	Custom    CustomRange
	// BgX is where the lanes' closed background starts (viewBox units
	// from X0): after 0 when the range begins before cbdash's first
	// record, which NoDataUntil then names ("07:58:02 UTC").
	BgX         float64
	NoDataUntil string
	X0          float64 // width of the title column, viewBox units
	W           float64 // width of the lanes
	H           float64 // total height (LaneTop + lanes * LaneStep)
	Axis        []Tick
	Lanes       []Lane
	Quiet       int // dependencies with no open instance in the range
}

// UserRow is one account on the admin page; Roles are the role choices
// with the user's own selected.
type UserRow struct {
	Name, Role, Created string
	Disabled            bool
	Roles               []Option
}

// TokenRow is one user API token or agent token on the admin page. Ref
// is its reference ("ut-12", "at-3f9c..."), Owner the user or the
// service it acts for; LastUsed and Expires are UTC stamps or "never".
type TokenRow struct {
	Ref, Owner, Name, Created, LastUsed, Expires string
	Expired                                      bool
}

// AccountEventRow is one entry of the account log.
type AccountEventRow struct {
	At, Actor, Action, Subject, Detail string
}

// Admin is the admin page: accounts, user API tokens, agent tokens and
// the account log. A secret just created is shown once in Secret; Notice
// says what the last action did.
type Admin struct {
	Page        Page
	Users       []UserRow
	Roles       []Option
	Secret      string
	SecretLabel string
	Notice      string
	APITokens   []TokenRow
	AgentTokens []TokenRow
	Events      []AccountEventRow
}
