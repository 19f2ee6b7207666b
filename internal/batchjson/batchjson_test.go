package batchjson_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cbdash/cbdash/internal/batchjson"
	"github.com/cbdash/cbdash/internal/loadgen"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// seeds are batches as agents send them, and near misses it must leave
// to encoding/json.
func seeds() [][]byte {
	full, _ := json.Marshal(protocol.Batch{Type: protocol.TypeBatch, Seq: 7, SentAt: 1, Windows: []protocol.Window{{
		Breaker: "pay", Start: -5, Millis: 1000, State: protocol.StateForcedOpen, ForcedUntil: 99,
		Counts:   protocol.Counts{Admitted: 1, Successes: 2, Failures: 3, Errors: 4, Timeouts: 5, Panics: 6, Slow: 7, Ignored: 8, RejectedOpen: 9, RejectedHalfOpen: 10, RejectedForced: 11, RejectedBulkhead: 12, FallbackSuccess: 13, FallbackFailure: 14, Misuse: 15, RejectedRamp: 16},
		InFlight: 3, Latency: []int64{}, LatencySumMs: 1.5e-3,
		Headroom: protocol.Headroom{Calls: 1, Failures: 2, Slow: 3, MinimumCalls: 4, FailureRate: 55.5, FailureRateThreshold: 50, SlowCallRate: 0.25, SlowCallRateThreshold: 1e300},
	}}})
	return [][]byte{
		loadgen.SampleBatch(20, 1), loadgen.SampleBatch(1, 1<<63), full,
		[]byte(`{"type":"batch","seq":1,"windows":[]}`),
		[]byte(` {"type":"batch","seq":1,"windows":[ {"breaker":"a","latency":[1, 2 ,3]} ] } `),
		[]byte(`{"type":"batch","seq":1,"Windows":[]}`),                             // another case
		[]byte(`{"type":"batch","seq":1,"seq":2}`),                                  // repeated key
		[]byte(`{"type":"batch","seq":1.0}`),                                        // not an integer
		[]byte(`{"type":"batch","seq":-1}`),                                         // negative
		[]byte(`{"type":"batch","sent_at":9223372036854775808}`),                    // overflow
		[]byte(`{"type":"batch","windows":[{"breaker":"a\u0041"}]}`),                // escape
		[]byte(`{"type":"batch","windows":null}`),                                   // null
		[]byte(`{"type":"batch","transitions":[]}`),                                 // not handled
		[]byte(`{"type":"batch","seq":1} x`),                                        // trailing data
		[]byte(`{"type":"batch","windows":[{"latency_sum_ms":1e400}]}`),             // out of range
		[]byte(`{"type":"batch","windows":[{"latency_sum_ms":-0.0e+1}]}`),           // odd but valid
		[]byte(`{"type":"batch","windows":[{"counts":{"misuse":1,"admitted":2}}]}`), // any order
		[]byte(`{"type":"batch","seq":01}`),                                         // bad number
	}
}

func TestDecodeIsEncodingJSONOnAgentBatches(t *testing.T) {
	for i, data := range seeds()[:5] {
		got, ok := batchjson.Decode(data)
		if !ok {
			t.Fatalf("seed %d: gave up on %s", i, data)
		}
		var want protocol.Batch
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d:\n got %#v\nwant %#v", i, got, want)
		}
	}
}

func TestDecodeGivesUpOnWhatItDoesNotKnow(t *testing.T) {
	for _, data := range seeds()[5:] {
		if _, ok := batchjson.Decode(data); ok {
			var want protocol.Batch
			if json.Unmarshal(data, &want) != nil {
				t.Errorf("accepted what encoding/json refuses: %s", data)
			}
		}
	}
}

// FuzzDecodeMatchesJSON: whatever Decode accepts, encoding/json decodes
// to the same Batch.
func FuzzDecodeMatchesJSON(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return
		}
		got, ok := batchjson.Decode(data)
		if !ok {
			return
		}
		var want protocol.Batch
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("Decode accepted what encoding/json refuses (%v): %q", err, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("differs on %q:\n got %#v\nwant %#v", data, got, want)
		}
	})
}

// TestDecodedBatchesShareNothing: windows are decoded in a pooled scratch
// and copied out; a batch must own its windows and histograms (a later
// decode reuses the scratch), each histogram must end at its own length
// (an append must not write into the next window's), and nothing of one
// batch may show in the next (here: histograms in a batch without any).
func TestDecodedBatchesShareNothing(t *testing.T) {
	first, ok := batchjson.Decode([]byte(`{"type":"batch","seq":1,"windows":[{"breaker":"a","latency":[1,2]},{"breaker":"b"},{"breaker":"c","latency":[3]},{"breaker":"d","latency":[]}]}`))
	if !ok {
		t.Fatal("gave up")
	}
	want := [][]int64{{1, 2}, nil, {3}, {}}
	for i, w := range first.Windows {
		if !reflect.DeepEqual(w.Latency, want[i]) || cap(w.Latency) != len(w.Latency) {
			t.Fatalf("window %d: latency %v (cap %d), want %v at cap %d", i, w.Latency, cap(w.Latency), want[i], len(want[i]))
		}
	}
	if cap(first.Windows) != len(first.Windows) {
		t.Errorf("windows: cap %d for %d", cap(first.Windows), len(first.Windows))
	}
	_ = append(first.Windows[0].Latency, 99)
	if first.Windows[2].Latency[0] != 3 {
		t.Fatalf("an append to one histogram wrote into the next: %v", first.Windows[2].Latency)
	}
	second, ok := batchjson.Decode([]byte(`{"type":"batch","seq":2,"windows":[{"breaker":"x"},{"breaker":"y"}]}`))
	if !ok {
		t.Fatal("gave up")
	}
	for i, w := range second.Windows {
		if w.Latency != nil || w.Breaker != []string{"x", "y"}[i] {
			t.Fatalf("second batch's window %d = %+v: state of the first batch left in the scratch", i, w)
		}
	}
	if first.Windows[0].Breaker != "a" || first.Windows[1].Breaker != "b" || !reflect.DeepEqual(first.Windows[0].Latency, []int64{1, 2}) {
		t.Fatalf("the first batch changed after a second decode: %+v", first.Windows)
	}
	if _, ok := batchjson.Decode([]byte(`{"type":"batch","windows":[{"breaker":"p","latency":[1]},{"breaker":"q","latency":[x]}]}`)); ok {
		t.Fatal("accepted a bad histogram")
	}
	third, _ := batchjson.Decode([]byte(`{"type":"batch","windows":[{"breaker":"z"}]}`))
	if len(third.Windows) != 1 || third.Windows[0].Latency != nil || third.Windows[0].Breaker != "z" {
		t.Fatalf("after a batch given up half-way: %+v", third.Windows)
	}
}

// TestDecodeOutOfOrderWindows: a window Go's encoder did not write (keys
// in another order, a space) leaves the in-order path part-way, after
// its histogram was taken; decoding it again from its start must give
// what encoding/json gives, with the histogram once. A repeated key after
// the last field is refused as before.
func TestDecodeOutOfOrderWindows(t *testing.T) {
	sample, ok := batchjson.Decode(loadgen.SampleBatch(1, 1))
	if !ok {
		t.Fatal("gave up on the sample")
	}
	w := sample.Windows[0]
	w.Latency = []int64{1, 2, 3}
	inOrder, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	s := string(inOrder)
	at := strings.Index(s, `,"latency_sum_ms":`)
	hr := strings.Index(s, `,"headroom":`)
	if at < 0 || hr < at {
		t.Fatalf("unexpected window JSON %s", s)
	}
	// headroom before latency_sum_ms: the in-order path fails after the histogram.
	swapped := s[:at] + s[hr:len(s)-1] + s[at:hr] + "}"
	spaced := strings.Replace(s, `"start":`, `"start": `, 1)
	for _, win := range []string{s, swapped, spaced, s + "", strings.Replace(s, `{"breaker"`, `{ "breaker"`, 1)} {
		data := []byte(`{"type":"batch","seq":3,"windows":[` + s + `,` + win + `]}`)
		got, ok := batchjson.Decode(data)
		if !ok {
			t.Fatalf("gave up on %s", win)
		}
		var want protocol.Batch
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("window %s:\n got %#v\nwant %#v", win, got.Windows, want.Windows)
		}
	}
	repeated := []byte(`{"type":"batch","seq":3,"windows":[` + s[:len(s)-1] + `,"breaker":"b"}]}`)
	if _, ok := batchjson.Decode(repeated); ok {
		t.Fatal("accepted a repeated key after the last field")
	}
}
