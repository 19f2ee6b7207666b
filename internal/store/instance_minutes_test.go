package store_test

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestInstanceHistoryIsPerMinuteExactAndExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t, store.Options{Retention: store.Retention{InstanceMinutes: 2 * time.Hour}})
	m0 := t0.Truncate(time.Minute)
	// pay-1: two seconds in the first minute (closed, then open), one in
	// the second; pay-2: one quiet second; another dependency besides.
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{
		window("db", m0.Add(10*time.Second), protocol.StateClosed, 9, 1),
		window("cache", m0.Add(10*time.Second), protocol.StateClosed, 5, 0),
	}})
	open := window("db", m0.Add(11*time.Second), protocol.StateOpen, 0, 4)
	open.Counts.RejectedOpen = 7
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 2, Windows: []protocol.Window{open}})
	if mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 2, Windows: []protocol.Window{open}}) {
		t.Fatal("a duplicate batch was stored")
	}
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 3, Windows: []protocol.Window{window("db", m0.Add(70*time.Second), protocol.StateHalfOpen, 2, 0)}})
	mustSave(t, s, "pay", "pay-2", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", m0.Add(10*time.Second), protocol.StateClosed, 0, 0)}})

	got, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db", From: m0, To: m0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	want := []cbdash.InstanceMinute{
		{Instance: "pay-1", Start: m0.UTC(), Calls: 14, Failures: 5, Rejected: 7, State: protocol.StateOpen},
		{Instance: "pay-1", Start: m0.Add(time.Minute).UTC(), Calls: 2, State: protocol.StateHalfOpen},
		{Instance: "pay-2", Start: m0.UTC(), State: protocol.StateClosed},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("InstanceHistory =\n%+v\nwant\n%+v", got, want)
	}
	if r := got[0].FailureRate(); r < 35.7 || r > 35.8 {
		t.Errorf("failure rate %v, want 5 of 14", r)
	}
	if _, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay"}); !errors.Is(err, cbdash.ErrInvalid) {
		t.Errorf("no breaker: %v, want ErrInvalid", err)
	}
	if err := s.Compact(ctx, m0.Add(2*time.Hour+30*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err = s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Start != m0.Add(time.Minute).UTC() {
		t.Fatalf("after the retention of 2 h: %+v, want only the second minute", got)
	}
}

func TestFleetNotClosedCountsDependenciesAndInstancesPerMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t, store.Options{})
	m0 := t0.Truncate(time.Minute)
	save := func(inst string, seq uint64, ws ...protocol.Window) {
		t.Helper()
		mustSave(t, s, "pay", inst, 1, protocol.Batch{Seq: seq, Windows: ws})
	}
	// Minute 0: db open on pay-1 and pay-2, cache half-open on pay-1.
	// Minute 1: db open on pay-1 only; cache forced closed (not counted).
	// Minute 2: everything closed.
	save("pay-1", 1, window("db", m0, protocol.StateOpen, 0, 1), window("cache", m0, protocol.StateHalfOpen, 1, 0))
	save("pay-2", 1, window("db", m0.Add(5*time.Second), protocol.StateOpen, 0, 1))
	save("pay-1", 2, window("db", m0.Add(time.Minute), protocol.StateOpen, 0, 1), window("cache", m0.Add(time.Minute), protocol.StateForcedClosed, 1, 0))
	save("pay-1", 3, window("db", m0.Add(2*time.Minute), protocol.StateClosed, 1, 0))
	got, err := s.FleetNotClosed(ctx, m0, m0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []cbdash.FleetMinute{
		{Start: m0.UTC(), Dependencies: 2, Instances: 3},
		{Start: m0.Add(time.Minute).UTC(), Dependencies: 1, Instances: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FleetNotClosed = %+v, want %+v", got, want)
	}
}

// TestTheInstanceMinuteReadsMergeTheSumsNotWrittenYetAndWriteNothing: the
// fleet timeline counts written minutes and the writer's sums not written
// yet alike, a key in both once, the worst state of the two; a
// dependency's instance history adds the two exactly; and neither read
// writes anything (the overview and the dependency page read them on
// every load).
func TestTheInstanceMinuteReadsMergeTheSumsNotWrittenYetAndWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clockAt(t0)
	s, path := openStore(t, store.Options{Clock: clk})
	m0 := t0.Truncate(time.Minute)
	save := func(inst string, seq uint64, ws ...protocol.Window) {
		t.Helper()
		mustSave(t, s, "pay", inst, 1, protocol.Batch{Seq: seq, Windows: ws})
	}
	imRows := func() int {
		t.Helper()
		var n int
		if err := rawDB(t, path).QueryRow(`SELECT COUNT(*) FROM instance_minutes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Minute 0, written to the table (by the writer's next transaction
	// once the minute and its grace have passed): db open on pay-1,
	// closed on pay-2 and pay-3.
	save("pay-1", 1, window("db", m0, protocol.StateOpen, 0, 1))
	save("pay-2", 1, window("db", m0, protocol.StateClosed, 1, 0))
	save("pay-3", 1, window("db", m0, protocol.StateClosed, 1, 0))
	clk.Advance(2 * time.Minute)
	save("pay-4", 1, window("other", m0.Add(2*time.Minute), protocol.StateClosed, 1, 0))
	written := imRows()
	if written != 3 {
		t.Fatalf("%d rows written, want 3", written)
	}
	// Not written yet: later reports of minute 0, pay-1 closed (its row
	// says open: it stays counted, once), pay-2 open (its row says
	// closed: now counted); minute 1, cache forced open on pay-3.
	save("pay-1", 2, window("db", m0.Add(30*time.Second), protocol.StateClosed, 1, 0))
	save("pay-2", 2, window("db", m0.Add(30*time.Second), protocol.StateOpen, 0, 1))
	save("pay-3", 2, window("cache", m0.Add(time.Minute), protocol.StateForcedOpen, 0, 0))
	got, err := s.FleetNotClosed(ctx, m0, m0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []cbdash.FleetMinute{
		{Start: m0.UTC(), Dependencies: 1, Instances: 2},
		{Start: m0.Add(time.Minute).UTC(), Dependencies: 1, Instances: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FleetNotClosed = %+v, want %+v", got, want)
	}
	if n := imRows(); n != written {
		t.Fatalf("FleetNotClosed wrote instance minutes: %d rows, %d before", n, written)
	}
	// Outside [from, to): nothing.
	if got, err := s.FleetNotClosed(ctx, m0.Add(2*time.Minute), m0.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("after the minutes: %+v, %v; want none", got, err)
	}
	// db's history: rows and sums added, and pay-5, which has only a
	// sum not written yet, by its name.
	save("pay-5", 1, window("db", m0.Add(time.Minute), protocol.StateHalfOpen, 3, 2))
	hist, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db", From: m0, To: m0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	wantHist := []cbdash.InstanceMinute{
		{Instance: "pay-1", Start: m0.UTC(), Calls: 2, Failures: 1, State: protocol.StateOpen},
		{Instance: "pay-2", Start: m0.UTC(), Calls: 2, Failures: 1, State: protocol.StateOpen},
		{Instance: "pay-3", Start: m0.UTC(), Calls: 1, State: protocol.StateClosed},
		{Instance: "pay-5", Start: m0.Add(time.Minute).UTC(), Calls: 5, Failures: 2, State: protocol.StateHalfOpen},
	}
	if !reflect.DeepEqual(hist, wantHist) {
		t.Fatalf("InstanceHistory =\n%+v\nwant\n%+v", hist, wantHist)
	}
	if n := imRows(); n != written {
		t.Fatalf("InstanceHistory wrote instance minutes: %d rows, %d before", n, written)
	}
	// Once the writer has written everything, the same history.
	clk.Advance(2 * time.Minute)
	save("pay-4", 2, window("other", m0.Add(4*time.Minute), protocol.StateClosed, 1, 0))
	if n := imRows(); n <= written {
		t.Fatalf("%d rows after the next round, want more than %d", n, written)
	}
	hist, err = s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db", From: m0, To: m0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(hist, wantHist) {
		t.Fatalf("InstanceHistory once written =\n%+v\nwant\n%+v", hist, wantHist)
	}
}

// A hello that no longer declares a breaker forgets the breaker's row, not
// its per-instance history.
func TestInstanceHistoryOutlivesABreakerNoLongerDeclared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t, store.Options{})
	m0 := t0.Truncate(time.Minute)
	if err := s.SaveHello(ctx, hello("pay", "pay-1", 1, "db", "cache"), t0); err != nil {
		t.Fatal(err)
	}
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", m0, protocol.StateOpen, 1, 1)}})
	if err := s.SaveHello(ctx, hello("pay", "pay-1", 1, "cache"), t0); err != nil {
		t.Fatalf("a hello without db: %v", err)
	}
	got, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db"})
	if err != nil || len(got) != 1 || got[0].Calls != 2 || got[0].State != protocol.StateOpen {
		t.Fatalf("db's history after the hello: %+v, %v", got, err)
	}
}

// TestInstanceHistoryCountsEverySumOnceWhileTheWriterWritesThem: while
// batches keep adding to one instance minute and the writer keeps writing
// its sum to the table (a round every third batch: the store's clock
// moves 4 s a batch, a round is due every instanceMinutesEvery, 10 s),
// every read of the history counts each committed batch once: never a sum
// both in the table and still in the writer's memory (two or three calls
// too many), never one in neither (too few). It fails when the reads do
// not merge the writer's sums, or count a written one again; the moment
// between a round's commit and the sums leaving memory is short, and
// these runs need not hit it: TestAnInstanceHistoryReadAcrossARoundRetries
// puts a round there.
func TestInstanceHistoryCountsEverySumOnceWhileTheWriterWritesThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clockAt(t0)
	s, _ := openStore(t, store.Options{Clock: clk})
	m0 := t0.Truncate(time.Minute)
	const batches = 150
	var started, committed atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := range batches {
			select {
			case <-stop:
				return
			default:
			}
			clk.Advance(4 * time.Second)
			started.Add(1)
			if _, err := s.SaveBatch(ctx, "pay", "pay-1", 1, protocol.Batch{Seq: uint64(i + 1), Windows: []protocol.Window{
				window("db", m0.Add(time.Duration(i%60)*time.Second), protocol.StateClosed, 1, 0)}}, t0); err != nil {
				t.Errorf("batch %d: %v", i+1, err)
				return
			}
			committed.Add(1)
		}
	}()
	defer func() { close(stop); <-done }()
	reads, moved := 0, false
	for {
		select {
		case <-done:
			if reads == 0 || !moved {
				t.Fatalf("%d reads, sums written meanwhile: %v", reads, moved)
			}
			return
		default:
		}
		before := committed.Load()
		hist, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db"})
		if err != nil {
			t.Fatal(err)
		}
		after := started.Load() // a batch may be committed before SaveBatch returns
		var calls int64
		for _, m := range hist {
			calls += m.Calls
		}
		if calls < before || calls > after {
			t.Fatalf("read %d: %d calls, with %d batches committed before and %d begun after", reads, calls, before, after)
		}
		reads++
		moved = moved || store.InstanceMinuteRounds(s) > 0
	}
}

// TestAnInstanceHistoryReadAcrossARoundRetries: a round of the writer
// moves a sum from its memory to the table between the history's read of
// the memory and its read of the table; the read sees the round and reads
// again, counting the sum once. And during the moment between that
// round's commit and the sum leaving memory, no reader can read the
// memory (it holds the sum and the table does too).
func TestAnInstanceHistoryReadAcrossARoundRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clockAt(t0)
	s, _ := openStore(t, store.Options{Clock: clk})
	m0 := t0.Truncate(time.Minute)
	settledAtCommit := make(chan bool, 16)
	store.OnInstanceMinutesCommitted(s, func(settled bool) { settledAtCommit <- settled })
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", m0, protocol.StateClosed, 4, 1)}})
	scans := 0
	store.OnInstanceHistoryScanned(s, func() {
		scans++
		if scans > 1 {
			return
		}
		// Between the two reads: a round writes minute 0's sum (due
		// once its minute and grace have passed).
		clk.Advance(2 * time.Minute)
		mustSave(t, s, "pay", "pay-2", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{window("other", m0.Add(2*time.Minute), protocol.StateClosed, 1, 0)}})
	})
	hist, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if store.InstanceMinuteRounds(s) == 0 {
		t.Fatal("no round wrote the sum between the reads")
	}
	want := []cbdash.InstanceMinute{{Instance: "pay-1", Start: m0.UTC(), Calls: 5, Failures: 1, State: protocol.StateClosed}}
	if !reflect.DeepEqual(hist, want) {
		t.Fatalf("InstanceHistory across a round =\n%+v\nwant\n%+v", hist, want)
	}
	if scans != 2 {
		t.Fatalf("%d reads of the writer's sums, want 2 (one again after the round)", scans)
	}
	select {
	case settled := <-settledAtCommit:
		if settled {
			t.Fatal("between the round's commit and its sums leaving memory, a reader would take the sums for settled")
		}
	default:
		t.Fatal("the round's commit was not seen")
	}
}

// TestAFailedCompactKeepsTheSumsNotWrittenYet: retention that fails after
// deleting expired instance minutes is rolled back, table and writer's
// memory alike: the history still counts every batch (SQLite: a trigger
// makes the delete that follows fail).
func TestAFailedCompactKeepsTheSumsNotWrittenYet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clockAt(t0)
	s, path := openStore(t, store.Options{Clock: clk, Retention: store.Retention{InstanceMinutes: time.Hour}})
	if store.IsPostgres(path) {
		t.Skip("the failure is made with a SQLite trigger")
	}
	m0 := t0.Truncate(time.Minute)
	mustSave(t, s, "pay", "pay-1", 1, protocol.Batch{Seq: 1, Windows: []protocol.Window{window("db", m0, protocol.StateClosed, 7, 1)}})
	if _, err := rawDB(t, path).Exec(`CREATE TRIGGER fail_runs BEFORE DELETE ON instance_runs BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	// A run of another process of pay-1, before the seconds' retention:
	// Compact deletes it, and the trigger refuses.
	if _, err := rawDB(t, path).Exec(`INSERT INTO instance_runs (instance_id, started_at, last_seq) SELECT id, -5, 0 FROM instances WHERE name = 'pay-1'`); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(ctx, m0.Add(2*time.Hour)); err == nil {
		t.Fatal("Compact succeeded; the test's trigger should have made it fail")
	}
	hist, err := s.InstanceHistory(ctx, cbdash.InstanceHistoryQuery{Service: "pay", Breaker: "db"})
	if err != nil {
		t.Fatal(err)
	}
	want := []cbdash.InstanceMinute{{Instance: "pay-1", Start: m0.UTC(), Calls: 8, Failures: 1, State: protocol.StateClosed}}
	if !reflect.DeepEqual(hist, want) {
		t.Fatalf("after a failed Compact: %+v, want %+v", hist, want)
	}
}
