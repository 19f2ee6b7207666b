//go:build unix

package tune_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// day is 24 h of one dependency with 20 instances, each making 50 calls
// a second (1,000 a second in all), 2% failing, with an hour-long
// outage climbing to 100% every 6 hours.
func day() []cbdash.Point {
	const n, per = 20, 50
	pts := make([]cbdash.Point, 0, 86400)
	for i := range 86400 {
		rate := 0.02
		if k := i % (6 * 3600); k < 3600 {
			rate = min(1, 0.02+float64(k)/600)
		}
		c := int64(n * per)
		f := int64(float64(c) * rate)
		pts = append(pts, cbdash.Point{At: t0.Add(time.Duration(i) * time.Second), Width: time.Second, Reports: n,
			Counts: protocol.Counts{Admitted: c, Successes: c - f, Failures: f, Errors: f}})
	}
	return pts
}

// BenchmarkReplayDay: one settings (the live ones) over day(): the
// typical instance's 4.3 million calls through a real breaker.
func BenchmarkReplayDay(b *testing.B) {
	pts := day()
	sets := []tune.Labeled{{Label: "live", Settings: liveSettings}}
	runBench(b, pts, sets)
}

// BenchmarkSweepDay: 20 candidates over day(), as Sweep runs them.
func BenchmarkSweepDay(b *testing.B) {
	pts := day()
	var sets []tune.Labeled
	for i := range 20 {
		spec := fmt.Sprintf("failure-rate=%d,minimum-calls=%d", 20+i*3, 10+i)
		c, err := tune.ParseCandidate(liveSettings, spec)
		if err != nil {
			b.Fatal(err)
		}
		sets = append(sets, tune.Labeled{Label: spec, Settings: c})
	}
	runBench(b, pts, sets)
}

// runBench replays pts under sets b.N times and reports, beside the wall
// time (which a busy machine stretches), the process's CPU time per
// replay: on one core, with nothing else running, the wall time.
func runBench(b *testing.B, pts []cbdash.Point, sets []tune.Labeled) {
	start := cpuTime()
	n := 0
	for b.Loop() {
		var rep tune.Report
		if _, err := tune.RunAll(context.Background(), pts, sets, &rep); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric((cpuTime()-start).Seconds()/float64(n), "cpu-s/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
