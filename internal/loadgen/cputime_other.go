//go:build !unix

package loadgen

import "time"

// cpuTime is unknown here: the decode floor falls back to wall time.
func cpuTime() time.Duration { return 0 }
