package templates

// FleetTimeline is the overview's line of the last hour: per minute, the
// dependencies and the instance breakers not closed, each minute linking
// to /timeline at that moment.
type FleetTimeline struct {
	Points []FleetPoint
	Ticks  []Tick // labels only, evenly spaced under the line
	// MaxInstances is the top of the scale (at least 1).
	MaxInstances int
	Peak         string // "peak 12 instances on 3 dependencies at 11:42 UTC", "" when all closed
	Fragment     string // where the line refreshes itself
}

// FleetPoint is one minute: a bar for the instances not closed and a dot
// for the dependencies, in viewBox units (the chart is 1000 x 100).
type FleetPoint struct {
	X, W              float64
	BarY, BarH        float64 // instances
	DotY              float64 // dependencies
	Instances, Deps   int
	Href, Title, Time string
}
