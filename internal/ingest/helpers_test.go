package ingest

import (
	"strconv"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// The messages of the collector's tests (internal/collector's
// harness_test.go), for the tests of the pipeline's parts.

func rawHello(instance string, startedAt int64) protocol.Hello {
	return protocol.Hello{
		Type: protocol.TypeHello, Protocol: protocol.Version, Service: "api", Instance: instance,
		SDKVersion: "test", StartedAt: startedAt, Labels: map[string]string{"region": "eu"},
		Breakers: []protocol.BreakerConfig{
			{Name: "db", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1},
			{Name: "cache", WindowKind: "count", WindowSize: 100, FailureRateThreshold: 50, MinimumCalls: 10, OpenDurationMillis: 5000, HalfOpenMaxCalls: 1, HalfOpenSuccessThreshold: 1},
		},
	}
}

func batchAt(at time.Time, seq uint64, admitted, failures int64, ts ...protocol.Transition) protocol.Batch {
	now := at.UnixMilli()
	state := protocol.StateClosed
	if len(ts) > 0 {
		state = ts[len(ts)-1].To
	}
	return protocol.Batch{
		Type: protocol.TypeBatch, Seq: seq, SentAt: now, Transitions: ts,
		Windows: []protocol.Window{{
			Breaker: "db", Start: now - 1000, Millis: 1000, State: state,
			Counts: protocol.Counts{Admitted: admitted, Successes: admitted - failures, Failures: failures, Errors: failures},
		}},
	}
}

func transAt(at time.Time, from, to string, gen uint64) protocol.Transition {
	return protocol.Transition{
		Breaker: "db", From: from, To: to, At: at.UnixMilli(), Generation: gen,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate, FailureRate: 60, Threshold: 50},
	}
}

func wideHello(service, instance, prefix string, n int, startedAt int64) protocol.Hello {
	h := rawHello(instance, startedAt)
	h.Service = service
	proto := h.Breakers[0]
	h.Breakers = make([]protocol.BreakerConfig, n)
	for i := range h.Breakers {
		h.Breakers[i] = proto
		h.Breakers[i].Name = prefix + strconv.Itoa(i)
	}
	return h
}
