//go:build unix

package loadgen

import (
	"syscall"
	"time"
)

// cpuTime is the CPU this process has used (user and system): the decode
// floor is measured in CPU, not wall time, so a busy machine does not
// inflate it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
