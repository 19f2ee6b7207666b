package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/afex/hystrix-go/hystrix"

	"github.com/cbdash/cbdash/internal/bubbletest"
)

// rollingFields are the counts of a HystrixCommand record of hystrix-go's
// stream that depend on the calls.
var rollingFields = []string{"requestCount", "errorCount", "errorPercentage", "rollingCountSuccess", "rollingCountFailure",
	"rollingCountTimeout", "rollingCountShortCircuited", "rollingCountThreadPoolRejected", "rollingCountSemaphoreRejected",
	"rollingCountFallbackSuccess", "rollingCountFallbackFailure"}

// recordStream reads hystrix-go's stream (from sh) as any dashboard
// would, keeping the rolling counts of each record of command, until ctx
// ends.
func recordStream(ctx context.Context, sh http.Handler, command string) (records func() []map[string]float64) {
	var mu sync.Mutex
	var got []map[string]float64
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://hystrix-go.test/hystrix.stream", nil)
		resp, err := (&http.Client{Transport: handlerTransport{sh}}).Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, found := strings.CutPrefix(sc.Text(), "data:")
			var rec map[string]any
			if !found || json.Unmarshal([]byte(data), &rec) != nil || rec["type"] != "HystrixCommand" || rec["name"] != command {
				continue
			}
			counts := map[string]float64{}
			for _, f := range rollingFields {
				counts[f], _ = rec[f].(float64)
			}
			mu.Lock()
			got = append(got, counts)
			mu.Unlock()
		}
	}()
	return func() []map[string]float64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]float64(nil), got...)
	}
}

// streamOf runs calls through a real hystrix-go command whose stream
// ticks phase into each second and returns the stream's records and
// hystrix-go's own count of failures. Run in a synctest bubble.
func streamOf(t *testing.T, command string, phase time.Duration, calls []call) ([]map[string]float64, int64) {
	t.Helper()
	countTotals()
	hystrix.ConfigureCommand(command, hystrix.CommandConfig{Timeout: 1000, MaxConcurrentRequests: 100,
		RequestVolumeThreshold: 20, SleepWindow: 5000, ErrorPercentThreshold: 50})
	start := time.Now()
	if _, _, err := hystrix.GetCircuit(command); err != nil {
		t.Fatal(err)
	}
	bubbletest.Advance(phase)
	sh := hystrix.NewStreamHandler()
	sh.Start()
	ctx, cancel := context.WithCancel(context.Background())
	records := recordStream(ctx, sh, command)
	for _, c := range calls {
		if d := time.Until(start.Add(2*time.Second + c.at)); d > 0 {
			bubbletest.Advance(d)
		}
		_ = hystrix.Do(command, func() error {
			if c.fail {
				return errDown
			}
			return nil
		}, func(error) error { return nil })
	}
	bubbletest.Advance(15 * time.Second)
	recs := records()
	cancel()
	sh.Stop()
	lib, _ := totalsOf(command).get()
	endCircuits(t, command)
	synctest.Wait()
	return recs, lib.Errors
}

// What one read of hystrix-go's stream tells, and what it cannot: two
// histories of steady calls (20 a second, 50 ms apart from 13 ms into the
// second, the 10th and 20th of each second failing, at 463 and 963 ms)
// that hystrix-go's stream, read 950 ms into each second, shows
// identically record by record, every count, although their failures
// differ by one in every 10 seconds, about 5%:
//
//   - A: every second has its failures at 463 and 963 ms: the read sees 9
//     whole seconds (18) and the failure at 463 ms of its own: 19.
//   - B: from second 20 on, every 10th second misses its failure at 963
//     ms, and each other second has it at 940 ms instead (before the
//     read) until the last such 10th second has left the window: a read
//     sees 17 in its 9 whole seconds and 2 of its own second, or 18 and
//     1 in a 10th second: 19 again. requestCount the same (199), the
//     successes are A's, and hystrix-go's keep-the-oldest rule sums no
//     oldest bucket in either (each read's second has a failure before
//     it).
//
// No reader of the stream can count both within 2%: a steady failure
// count of 2 a second can be told to within about 5% at best. cbdash
// takes steady traffic as steady (rollingCounts.steady): A's count, exact.
func TestHystrixGoStreamCannotTellSteadyHistoriesApart(t *testing.T) {
	const run, phase = 5 * time.Minute, 950 * time.Millisecond
	a := steadyCalls(run, 2*run) // no outage
	var b []call
	first, last := 20, int(run/time.Second)-20 // the 10th seconds missing a failure: first, first+10... <= last
	for _, c := range a {
		sec, ms := int(c.at/time.Second), c.at%time.Second
		if !c.fail || ms != 963*time.Millisecond || sec < first || sec >= last+10 {
			b = append(b, c)
			continue
		}
		if (sec-first)%10 == 0 && sec <= last {
			continue // this second misses its failure at 963 ms
		}
		c.at = time.Duration(sec)*time.Second + 940*time.Millisecond
		b = append(b, c)
	}
	var recA, recB []map[string]float64
	var failA, failB int64
	synctest.Test(t, func(t *testing.T) { recA, failA = streamOf(t, "history-a", phase, a) })
	synctest.Test(t, func(t *testing.T) { recB, failB = streamOf(t, "history-b", phase, b) })
	if len(recA) < int(run/time.Second) || len(recA) != len(recB) {
		t.Fatalf("%d and %d records, want one a second of the run for each", len(recA), len(recB))
	}
	for i := range recA {
		if !reflect.DeepEqual(recA[i], recB[i]) {
			t.Fatalf("record %d differs: %v and %v", i, recA[i], recB[i])
		}
	}
	off := float64(failA-failB) / float64(failA)
	t.Logf("%d records alike, every count; hystrix-go counted %d failures in A, %d in B (%.1f%% apart)", len(recA), failA, failB, 100*off)
	if off < 0.04 {
		t.Errorf("the histories' failures %d and %d are %.1f%% apart, want more than 4%%", failA, failB, 100*off)
	}
	// cbdash, reading the same records, counts the same for both: A's.
	var gotA, gotB int64
	synctest.Test(t, func(t *testing.T) {
		ws, _, _, _, _ := runCounts(t, "history-a-read", phase, a)
		gotA = sumCounts(ws).Errors
	})
	synctest.Test(t, func(t *testing.T) {
		ws, _, _, _, _ := runCounts(t, "history-b-read", phase, b)
		gotB = sumCounts(ws).Errors
	})
	t.Logf("cbdash counted %d failures of A, %d of B", gotA, gotB)
	if gotA != gotB || float64(max(gotA-failA, failA-gotA)) > 0.02*float64(failA) {
		t.Errorf("cbdash counted %d failures of A and %d of B, want the same, within 2%% of A's %d", gotA, gotB, failA)
	}
}
