package store_test

import (
	"bufio"
	"context"
	"fmt"
	"github.com/cbdash/cbdash/internal/storetest"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

const crashEnv = "CBDASH_STORE_CRASH_DB"

var crashInstances = []string{"a", "b", "c", "d"}

// crashBatch is batch seq of instance inst: one transition whose
// generation is the seq and one report of one call in second seq of the
// instance's own breaker, so that a duplicate shows as a count of 2.
func crashBatch(inst string, seq uint64) protocol.Batch {
	at := t0.Add(time.Duration(seq) * time.Second)
	return protocol.Batch{Seq: seq, Transitions: []protocol.Transition{{Breaker: "br-" + inst,
		From: protocol.StateClosed, To: protocol.StateOpen, At: at.UnixMilli(), Generation: seq,
		Cause: protocol.Cause{Kind: protocol.CauseFailureRate}}},
		Windows: []protocol.Window{{Breaker: "br-" + inst, Start: at.UnixMilli(), Millis: 1000,
			State: protocol.StateOpen, Counts: protocol.Counts{Admitted: 1, Successes: 1}}}}
}

// TestCrashChild is the process TestAckedBatchesSurviveKill kills: it
// saves batches as fast as it can and prints every acknowledged one.
func TestCrashChild(t *testing.T) {
	t.Parallel()
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("only run as the child of TestAckedBatchesSurviveKill")
	}
	s, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, inst := range crashInstances {
		wg.Go(func() {
			for seq := uint64(1); ; seq++ {
				stored, err := s.SaveBatch(context.Background(), "crash", inst, 1, crashBatch(inst, seq), t0)
				if err != nil {
					fmt.Println("error", err)
					os.Exit(1)
				}
				if stored {
					mu.Lock()
					fmt.Printf("ack %s %d\n", inst, seq)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

func TestAckedBatchesSurviveKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns a process")
	}
	path := storetest.Path(t) // on PostgreSQL: the collector process killed, the server keeps what it committed
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{} // highest acknowledged seq per instance (acks are in order per instance)
	sc := bufio.NewScanner(out)
	n := 0
	for n < 800 && sc.Scan() {
		var inst string
		var seq uint64
		if _, err := fmt.Sscanf(sc.Text(), "ack %s %d", &inst, &seq); err != nil {
			t.Fatalf("child said %q", sc.Text())
		}
		if seq != acked[inst]+1 {
			t.Fatalf("child acked %s/%d after %d", inst, seq, acked[inst])
		}
		acked[inst] = seq
		n++
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred code, no Close
		t.Fatal(err)
	}
	cmd.Wait()
	if n < 800 {
		t.Fatalf("child stopped after %d acks: %v", n, sc.Err())
	}

	s, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, inst := range crashInstances {
		last, err := s.LastSeq(ctx, "crash", inst, 1)
		if err != nil {
			t.Fatal(err)
		}
		if last < acked[inst] {
			t.Fatalf("%s: last stored seq %d < last acked %d: acknowledged data lost", inst, last, acked[inst])
		}
		// The agent resends everything it still holds; what was stored
		// must be recognised, the rest stored.
		for seq := uint64(1); seq <= last+3; seq++ {
			stored := mustSave(t, s, "crash", inst, 1, crashBatch(inst, seq))
			if stored != (seq > last) {
				t.Fatalf("%s: resent seq %d (last stored %d) stored=%v", inst, seq, last, stored)
			}
		}
		checkExactlyOnce(t, s, inst, last+3)
	}
	t.Logf("acked before kill: %v", acked)
}

// checkExactlyOnce verifies that batches 1..upTo of inst are each stored
// exactly once: one transition per generation and one call per second.
func checkExactlyOnce(t *testing.T, s *store.Store, inst string, upTo uint64) {
	t.Helper()
	ctx := context.Background()
	trs, err := s.Transitions(ctx, cbdash.TransitionQuery{Service: "crash", Instance: inst, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	gens := map[uint64]int{}
	for _, tr := range trs {
		gens[tr.Generation]++
	}
	pts, err := s.History(ctx, cbdash.HistoryQuery{DependencyKey: cbdash.DependencyKey{Service: "crash", Breaker: "br-" + inst},
		From: t0, To: t0.Add(time.Duration(upTo+1) * time.Second), Resolution: cbdash.ResolutionSecond})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[int64]int64{}
	for _, p := range pts {
		calls[p.At.Sub(t0).Milliseconds()/1000] = p.Counts.Admitted
	}
	if len(gens) != int(upTo) || len(calls) != int(upTo) {
		t.Fatalf("%s: %d distinct transitions and %d seconds stored, want %d", inst, len(gens), len(calls), upTo)
	}
	for seq := uint64(1); seq <= upTo; seq++ {
		if gens[seq] != 1 || calls[int64(seq)] != 1 {
			t.Fatalf("%s: batch %d stored %d times (transitions) / %d calls, want exactly once", inst, seq, gens[seq], calls[int64(seq)])
		}
	}
}
