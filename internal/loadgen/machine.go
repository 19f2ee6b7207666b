package loadgen

import (
	"os"
	"strconv"
	"strings"
)

// loadAverage is the machine's 1-minute load average, from /proc/loadavg
// (Linux); -1 where there is none. A run on a machine busy with other
// work measures that work as well: the figures are to be given
// with it.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// loadText formats a load average of loadAverage ("unknown" for -1).
func loadText(v float64) string {
	if v < 0 {
		return "unknown"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
