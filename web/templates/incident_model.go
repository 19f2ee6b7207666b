package templates

// IncidentRow is one incident in the incidents list.
type IncidentRow struct {
	ID         string
	Href       string
	Dependency string // "service/breaker"
	DepHref    string
	Start      string
	Duration   string
	State      State // open (still open) or closed (resolved)
	Instances  string
	Opens      int
	Cause      string
}

// IncidentFilter is the list's filter form as submitted.
type IncidentFilter struct {
	Service, Breaker string
	From, To         string // datetime-local values (UTC)
	Open             bool
	Services         []Option
}

// Incidents is the incidents list page.
type Incidents struct {
	Page     Page
	Filter   IncidentFilter
	Rows     []IncidentRow
	Fragment string // URL the list refreshes itself from (htmx polling)
}

// IncidentLane is one instance's states along the incident's time axis,
// in the viewBox units of Chart (Left..Right).
type IncidentLane struct {
	Instance string
	Spans    []Segment
}

// Marker is a vertical line on the lanes: an operator command, a
// configuration change, or the incident's start and end.
type Marker struct {
	X     float64
	Kind  string // command, config, start, end
	Label string // short text above the line
	Title string // tooltip
	Row   int    // label row (0 or 1), so that close labels do not overlap
}

// IncidentLanes is the lanes block: one axis shared with the charts.
type IncidentLanes struct {
	W, H        float64
	Left, Right float64
	Top         float64 // y of the first lane
	Step        float64 // lane height + gap
	Lanes       []IncidentLane
	Markers     []Marker
	Axis        []Tick
	// NoDataUntil, when set, is when the record starts ("07:58:02 UTC"):
	// the lanes are blank before it.
	NoDataUntil string
}

// SummaryItem is one line of the incident summary.
type SummaryItem struct {
	Label, Value, TestID string
}

// TimelineRow is one line of the incident timeline.
type TimelineRow struct {
	At, Offset, Kind, Instance, Text string
	Outside                          string // "before" or "after" the incident's own span; "" within
}

// NoteView is an operator's note.
type NoteView struct {
	At, Author, Text string
}

// Incident is the incident page.
type Incident struct {
	Page       Page
	ID         string
	Service    string
	Breaker    string
	DepHref    string
	State      State
	Summary    []SummaryItem
	Lanes      IncidentLanes
	Charts     []Chart
	Timeline   IncidentTimeline
	Notes      []NoteView
	CanNote    bool
	NoteAction string
	ExportMD   string
	ExportJSON string
	RangeText  string
}

// IncidentTimeline is the incident's timeline in three parts: the lead-in
// before its start and the tail after its end (context, perhaps another
// incident's events, shown folded and marked) around its own rows.
type IncidentTimeline struct {
	Before, Own, After []TimelineRow
}
