package holds

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
	"github.com/cbdash/cbdash/sdk/protocol"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is live state in memory: instances by key, each connected on a
// recordConn.
type fleet struct {
	mu    sync.Mutex
	insts map[Key]Instance
}

func (f *fleet) HoldInstances() []Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Instance
	for _, in := range f.insts {
		out = append(out, in)
	}
	return out
}

func (f *fleet) HoldInstance(k Key) (Instance, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.insts[k]
	return in, ok
}

// connect adds instance k (breaker "db") connected on a new recordConn.
func (f *fleet) connect(st *store.Store, k Key) *recordConn {
	c := &recordConn{st: st}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.insts[k] = Instance{Ref: cbdash.InstanceRef{Service: k.Service, Instance: k.Instance}, StartedAt: 1,
		Breakers: []string{"db"}, Conn: c}
	return c
}

// recordConn records what is delivered, and whether each command was in
// the store when it was.
type recordConn struct {
	st       *store.Store
	mu       sync.Mutex
	got      []cbdash.Command
	unstored []string // ids delivered before they were stored
}

func (c *recordConn) Deliver(cmd cbdash.Command, _ time.Time) {
	_, err := c.st.Command(context.Background(), cmd.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, cmd)
	if err != nil {
		c.unstored = append(c.unstored, cmd.ID)
	}
}

func (c *recordConn) delivered() ([]cbdash.Command, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cbdash.Command(nil), c.got...), append([]string(nil), c.unstored...)
}

// gatedStore is a real store whose coverage writes for instance "a"
// (AddHoldCoverage, or an ApplyHold with a delivery to "a") wait at a
// gate: reached is signalled, then they wait for open to close.
type gatedStore struct {
	*store.Store
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *gatedStore) AddHoldCoverage(ctx context.Context, holdID string, c cbdash.HoldCoverage) error {
	if c.Instance == "a" {
		g.once.Do(func() { close(g.reached) })
		<-g.open
	}
	return g.Store.AddHoldCoverage(ctx, holdID, c)
}

func (g *gatedStore) ApplyHold(ctx context.Context, ds []cbdash.HoldDelivery) error {
	for _, d := range ds {
		if d.Coverage != nil && d.Coverage.Instance == "a" {
			g.once.Do(func() { close(g.reached) })
			<-g.open
			break
		}
	}
	return g.Store.ApplyHold(ctx, ds)
}

type nopEvents struct{}

func (nopEvents) Publish(cbdash.Event) {}

type nopCluster struct{}

func (nopCluster) HoldChanged(context.Context, string) {}

func newTestManager(t *testing.T) (*Manager, *fleet, *gatedStore) {
	t.Helper()
	clk := clocktest.NewRunning()
	st := &gatedStore{Store: storetest.Open(t, clk), reached: make(chan struct{}), open: make(chan struct{})}
	f := &fleet{insts: make(map[Key]Instance)}
	m := New(Config{Instances: f, Store: st, Events: nopEvents{}, Cluster: nopCluster{}, Now: clk.Now,
		CommandDelivery: time.Minute})
	if err := m.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, f, st
}

func holdOf(service string) cbdash.HoldRequest {
	return cbdash.HoldRequest{Selector: cbdash.Selector{Service: service, Breaker: "db"}, Action: protocol.ActionForceOpen,
		TTL: time.Hour, Reason: "drill", Actor: "ops"}
}

// wait fails t unless done is closed within a minute (a bound on a
// deadlock, not a pace).
func wait(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	bound := time.NewTimer(time.Minute)
	defer bound.Stop()
	select {
	case <-done:
	case <-bound.C:
		t.Fatalf("%s: still waiting after a minute", what)
	}
}

// A hold's writes for one instance keep no other instance waiting: the
// hello of an instance the hold does not cover, and that of one it
// covers but has already reached, are answered while the store write for
// instance "a" is held up. (Before, holds kept one lock over every
// covered instance's store writes, and every hello waited for it.)
func TestAHelloWaitsForNoOtherInstancesHoldWrites(t *testing.T) {
	m, f, st := newTestManager(t)
	ctx := context.Background()
	f.connect(st.Store, Key{"fleet", "a"})
	f.connect(st.Store, Key{"fleet", "b"})
	other := f.connect(st.Store, Key{"other", "x"})
	created := make(chan struct{})
	var h cbdash.HoldRecord
	var err error
	go func() {
		defer close(created)
		h, err = m.Create(ctx, holdOf("fleet"))
	}()
	wait(t, "the write for a", st.reached)
	hellos := make(chan struct{})
	go func() {
		defer close(hellos)
		m.Hello(ctx, Key{"other", "x"})
	}()
	wait(t, "a hello of an uncovered instance during the hold's write for a", hellos)
	close(st.open)
	wait(t, "the hold's creation", created)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Coverage) != 2 {
		t.Fatalf("coverage %+v, want a and b", h.Coverage)
	}
	if got, _ := other.delivered(); len(got) != 0 {
		t.Errorf("the uncovered instance was sent %+v", got)
	}
}

// A covered instance that says hello while the hold's creation is writing
// its command waits for that write: the command is stored before it is
// sent, the hello resends it (a reconnection), and the instance did not
// join late.
func TestAHelloDuringTheHoldsWriteForItIsServedAfterItAndIsNoLateJoin(t *testing.T) {
	m, f, st := newTestManager(t)
	ctx := context.Background()
	conn := f.connect(st.Store, Key{"fleet", "a"})
	created := make(chan struct{})
	var h cbdash.HoldRecord
	go func() {
		defer close(created)
		h, _ = m.Create(ctx, holdOf("fleet"))
	}()
	wait(t, "the write for a", st.reached)
	hello := make(chan struct{})
	go func() {
		defer close(hello)
		m.Hello(ctx, Key{"fleet", "a"})
	}()
	eventually.True(t, "the hello waits for a's turn", func() bool {
		m.turns.mu.Lock()
		defer m.turns.mu.Unlock()
		tn := m.turns.m[Key{"fleet", "a"}]
		return tn != nil && tn.users == 2
	})
	close(st.open)
	wait(t, "the hold's creation", created)
	wait(t, "the hello", hello)
	got, unstored := conn.delivered()
	if len(unstored) > 0 {
		t.Errorf("commands %v were sent before they were stored", unstored)
	}
	want := CommandID(h.ID, "fleet")
	if len(got) != 2 || got[0].ID != want || got[1].ID != want {
		t.Fatalf("delivered %+v, want %s twice (the creation's, the hello's)", got, want)
	}
	stored, err := m.Hold(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.Coverage) != 1 || stored.Coverage[0].JoinedLate {
		t.Errorf("coverage %+v, want a, not late", stored.Coverage)
	}
}

// A hold released while a hello is applying it to an instance (its
// write in progress, so not yet recorded as applied there) still reaches
// that instance as a release: the hello plans again when the holds
// changed under it.
func TestAHoldReleasedWhileAHelloAppliesItIsReleasedThere(t *testing.T) {
	m, f, st := newTestManager(t)
	ctx := context.Background()
	h, err := m.Create(ctx, holdOf("fleet")) // no instance yet
	if err != nil {
		t.Fatal(err)
	}
	conn := f.connect(st.Store, Key{"fleet", "a"})
	hello := make(chan struct{})
	go func() {
		defer close(hello)
		m.Hello(ctx, Key{"fleet", "a"})
	}()
	wait(t, "the hello's write for a", st.reached)
	released := make(chan struct{})
	go func() {
		defer close(released)
		if _, err := m.Release(ctx, h.ID, "ops", "drill over"); err != nil {
			t.Error(err)
		}
	}()
	wait(t, "the release, while the hello's write for a waits", released)
	close(st.open)
	wait(t, "the hello", hello)
	got, unstored := conn.delivered()
	if len(unstored) > 0 {
		t.Errorf("commands %v were sent before they were stored", unstored)
	}
	if len(got) != 2 || got[0].ID != CommandID(h.ID, "fleet") || got[1].ID != ReleaseCommandID(h.ID, "fleet") {
		t.Fatalf("delivered %+v, want the hold then its release", got)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.applied[Key{"fleet", "a"}]; len(a) != 0 {
		t.Errorf("still applied: %+v", a)
	}
}

// countEvents counts the command events published, and keeps the
// number of targets of the last one.
type countEvents struct {
	mu      sync.Mutex
	n       int
	targets int
}

func (c *countEvents) Publish(e cbdash.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if e.Command != nil {
		c.targets = len(e.Command.Targets)
	}
}

// A fleet-wide hold is written a chunk of instances at a time: one store
// write per chunk (the commands, their targets and the coverage rows),
// not three per instance, and its command published once, when every
// chunk is written, with all its targets (not once a chunk, each read
// back with every target stored so far). Every instance is still
// covered, and sent its command after it was stored.
func TestAFleetWideHoldIsWrittenAChunkAtATime(t *testing.T) {
	m, f, st := newTestManager(t)
	ev := &countEvents{}
	m.cfg.Events = ev
	close(st.open)
	ctx := context.Background()
	const n = 2*chunk + 10
	conns := make([]*recordConn, n)
	for i := range n {
		conns[i] = f.connect(st.Store, Key{"fleet", fmt.Sprintf("f-%04d", i)})
	}
	txs := st.Stats().Transactions
	h, err := m.Create(ctx, holdOf("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	if w := st.Stats().Transactions - txs; w > 1+3 {
		t.Errorf("the hold took %d store writes, want 4 (the hold, 3 chunks)", w)
	}
	if len(h.Coverage) != n {
		t.Errorf("%d covered, want %d", len(h.Coverage), n)
	}
	if ev.n != 1 || ev.targets != n {
		t.Errorf("%d command events, the last with %d targets; want 1 (the hold's command once), with %d", ev.n, ev.targets, n)
	}
	for i, c := range conns {
		got, unstored := c.delivered()
		if len(got) != 1 || got[0].ID != CommandID(h.ID, "fleet") || len(unstored) > 0 {
			t.Fatalf("instance %d was delivered %+v (unstored %v), want the hold's command once", i, got, unstored)
		}
	}
	cmd, err := st.Command(ctx, CommandID(h.ID, "fleet"))
	if err != nil || len(cmd.Targets) != n {
		t.Fatalf("command %d targets, %v; want %d", len(cmd.Targets), err, n)
	}
}
