package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

var dbKey = cbdash.DependencyKey{Service: "pay", Breaker: "db"}

func TestHistoryChoosesResolutionFromTheRange(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", t0, protocol.StateClosed, 3, 1)}})
	for _, c := range []struct {
		span  time.Duration
		width time.Duration
	}{{2 * time.Hour, time.Second}, {3 * 24 * time.Hour, time.Minute}, {4 * 24 * time.Hour, time.Hour}} {
		t.Run(c.span.String(), func(t *testing.T) {
			p, err := s.History(context.Background(), cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: t0.Add(c.span)})
			if err != nil {
				t.Fatal(err)
			}
			if len(p) != 1 || p[0].Width != c.width || p[0].Counts.Admitted != 4 || !p[0].At.Equal(t0) {
				t.Fatalf("points = %+v, want one of width %v with 4 calls", p, c.width)
			}
		})
	}
}

func TestHistoryRefusesInvalidQueries(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	for name, q := range map[string]cbdash.HistoryQuery{
		"no breaker":         {DependencyKey: cbdash.DependencyKey{Service: "pay"}, From: t0, To: t0.Add(time.Hour)},
		"empty range":        {DependencyKey: dbKey, From: t0, To: t0},
		"unknown resolution": {DependencyKey: dbKey, From: t0, To: t0.Add(time.Hour), Resolution: "fortnight"},
		"too many points":    {DependencyKey: dbKey, From: t0, To: t0.Add(30 * time.Hour), Resolution: cbdash.ResolutionSecond},
		"per instance":       {DependencyKey: dbKey, Instance: "pay-1", From: t0, To: t0.Add(time.Hour)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.History(context.Background(), q); !errors.Is(err, cbdash.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	p, err := s.History(context.Background(), cbdash.HistoryQuery{DependencyKey: cbdash.DependencyKey{Service: "x", Breaker: "y"}, From: t0, To: t0.Add(time.Hour)})
	if err != nil || p == nil || len(p) != 0 {
		t.Fatalf("unknown dependency: %v, %v; want an empty list", p, err)
	}
}

func TestConcurrentBatchesAreGroupCommittedExactly(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, store.Options{})
	const instances, batches = 50, 20
	var wg sync.WaitGroup
	for i := range instances {
		inst := string(rune('A'+i%26)) + string(rune('a'+i/26))
		wg.Go(func() {
			for seq := uint64(1); seq <= batches; seq++ {
				w := window("db", t0.Add(time.Duration(seq)*time.Second), protocol.StateClosed, 2, 1)
				stored, err := s.SaveBatch(context.Background(), "pay", inst, 1, protocol.Batch{Seq: seq, Windows: []protocol.Window{w}}, t0)
				if err != nil || !stored {
					t.Errorf("%s/%d: stored=%v err=%v", inst, seq, stored, err)
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	if st.Ops < instances*batches || st.Transactions >= st.Ops {
		t.Errorf("stats %+v: want %d ops in fewer transactions (group commit)", st, instances*batches)
	}
	p, err := s.History(context.Background(), cbdash.HistoryQuery{DependencyKey: dbKey, From: t0, To: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != batches {
		t.Fatalf("%d seconds, want %d", len(p), batches)
	}
	for _, pt := range p {
		if pt.Counts.Admitted != 3*instances || pt.Counts.Failures != instances || pt.InFlight != instances || pt.Latency[2] != 2*instances {
			t.Fatalf("second %v = %+v, want the sum of %d instances", pt.At, pt, instances)
		}
	}
}

func TestCloseCommitsQueuedWritesAndRefusesLaterOnes(t *testing.T) {
	t.Parallel()
	s, path := openStore(t, store.Options{})
	const writers = 20
	results := make(chan error, writers*50)
	var wg sync.WaitGroup
	for i := range writers {
		inst := string(rune('a' + i))
		wg.Go(func() {
			for seq := uint64(1); seq <= 50; seq++ {
				stored, err := s.SaveBatch(context.Background(), "pay", inst, 1, protocol.Batch{Seq: seq}, t0)
				if err == nil && !stored {
					t.Errorf("%s/%d not stored", inst, seq)
				}
				results <- err
				if err != nil {
					return
				}
			}
		})
	}
	// Close in the middle of the stream: once some batches are in.
	eventually.True(t, "some batches stored", func() bool { return len(results) >= writers })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	acked := 0
	for err := range results {
		switch {
		case err == nil:
			acked++
		case !errors.Is(err, store.ErrClosed):
			t.Fatalf("SaveBatch during Close: %v, want nil or ErrClosed", err)
		}
	}
	s2, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	total := uint64(0)
	for i := range writers {
		n, err := s2.LastSeq(context.Background(), "pay", string(rune('a'+i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != uint64(acked) {
		t.Fatalf("%d batches stored, %d acknowledged", total, acked)
	}
}
