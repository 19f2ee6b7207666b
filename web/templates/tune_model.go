package templates

// TunePanel is the dependency page's Tune panel (issue 31): a form that
// replays the dependency's recorded traffic under a candidate, and, once
// submitted, the table of runs and their state lanes.
type TunePanel struct {
	Action    string
	Hidden    []Option // the page's own parameters (Text = name)
	From, To  string   // RFC 3339, UTC
	Candidate string   // as typed: failure-rate=40,minimum-calls=20
	Keys      string   // the candidate keys, for the hint
	Error     string   // why the replay failed ("" if it ran or was not asked)
	Table     *TuneTable
	// ReviewHref asks for the review; Review is it, once asked (nil
	// before), ReviewError why it failed.
	ReviewHref  string
	Review      []ReviewLine
	ReviewError string
}

// ReviewLine is one answer of a breaker's review.
type ReviewLine struct {
	Key, Question, Verdict, Evidence, Change, Link string
}

// TuneTable is a replay's outcome.
type TuneTable struct {
	Summary string // "180 s as one of 2.0 instances, normal failure rate 2.0%, 1 failing episode"
	Rows    []TuneRow
	Notes   []string
	// Estimated are the spans whose calls were filled, drawn under every
	// lane.
	Estimated []LaneSeg
	// Recorded is the recorded lane: when any instance was out of closed.
	Recorded []LaneSeg
}

// TuneRow is one run: its figures as shown, and its state lane.
type TuneRow struct {
	Label, Settings                                   string
	Trips, Open, Rejected, IntoFailing, Detect, Flaps string
	FalseTrips                                        string
	FirstTrip                                         string // RFC 3339 with ms, "" without a trip
	Err                                               string
	Lane                                              []LaneSeg
	// Shadow marks the run of a shadow configuration the breaker
	// reported (its Trips then carry the recorded would-be trips).
	Shadow bool
}

// ShadowLanes is the dependency page's shadow section: the recorded lane
// and one lane per shadow configuration over the page's range.
type ShadowLanes struct {
	From, To string // the range's ends, time of day UTC
	Recorded []LaneSeg
	Lanes    []ShadowLane
}

// ShadowLane is one shadow configuration's would-be states: Label is
// "shadow: NAME (would have opened at ...)", Settings its settings in
// words ("" when not reported).
type ShadowLane struct {
	Name, Label, Settings string
	Segs                  []LaneSeg
}

// LaneSeg is a stretch of a lane out of closed: State (open, half_open,
// estimated), X and W its start and width on a scale of 1000 for the
// whole range (the lane's SVG viewBox).
type LaneSeg struct {
	State string
	X, W  string
	Title string
}
