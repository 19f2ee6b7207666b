package agent

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/cbdash/cbdash/sdk/breaker"
)

// An unregistered breaker is retired, not forgotten at once: the collector
// refuses a batch that reports a breaker its connection's hello does not
// declare, so the agent keeps declaring a retired breaker in its hellos
// until its last report is taken and nothing about it is left to deliver
// (in the inbox, pending, or in a batch not yet acknowledged). Then it is
// pruned, and the next hello (sent at once) no longer declares it: the
// collector forgets it.

// Unregister stops reporting b: from now on the agent sends no transition
// or window report of b, answers commands for it as for an unknown
// breaker, and sends the collector a hello without it once everything b
// counted until now (its last window report, taken at once) has been
// acknowledged. Transport.OnEvict calls it for evicted per-host breakers.
// Register may register b, or another breaker of the same name, again.
//
// Errors: ErrNotRegistered (b, this very breaker, is not registered),
// ErrClosed.
func (a *Agent) Unregister(b *breaker.Breaker) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	t := a.byName[b.Name()]
	if t == nil || t.b != b {
		a.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotRegistered, b.Name())
	}
	delete(a.byName, t.cfg.Name)
	a.breakers = slices.DeleteFunc(a.breakers, func(o *tracked) bool { return o == t })
	t.final = false
	a.retired = append(a.retired, t)
	a.mu.Unlock()
	t.unsub()
	signal(a.wake) // the report goroutine takes its last report
	return nil
}

// reviveLocked takes b back from the retired breakers, if it is one, so
// that its reports go on from the last one. a.mu must be held.
func (a *Agent) reviveLocked(b *breaker.Breaker) *tracked {
	i := slices.IndexFunc(a.retired, func(t *tracked) bool { return t.b == b })
	if i < 0 {
		return nil
	}
	t := a.retired[i]
	a.retired = slices.Delete(a.retired, i, i+1)
	return t
}

// eachDeclaredLocked calls fn with every breaker the hello declares, each
// name once: the registered breakers in registration order, then the
// retired ones. a.mu must be held.
func (a *Agent) eachDeclaredLocked(fn func(*tracked)) {
	for _, t := range a.breakers {
		fn(t)
	}
	if len(a.retired) == 0 {
		return
	}
	seen := make(map[string]bool, len(a.retired))
	for _, t := range a.retired {
		if a.byName[t.cfg.Name] == nil && !seen[t.cfg.Name] {
			seen[t.cfg.Name] = true
			fn(t)
		}
	}
}

// declaredLocked returns the breaker declared under name, or nil.
func (a *Agent) declaredLocked(name string) *tracked {
	if t := a.byName[name]; t != nil {
		return t
	}
	for _, t := range a.retired {
		if t.cfg.Name == name {
			return t
		}
	}
	return nil
}

func (a *Agent) declaredCountLocked() int {
	n := 0
	a.eachDeclaredLocked(func(*tracked) { n++ })
	return n
}

// retire takes the last window report of every breaker unregistered since
// the last call, at now, and queues it. It runs on the report goroutine,
// which owns the report states.
func (a *Agent) retire(now time.Time) {
	a.mu.Lock()
	var due []*tracked
	for _, t := range a.retired {
		if !t.final {
			due = append(due, t)
		}
	}
	a.mu.Unlock()
	if len(due) == 0 {
		return
	}
	var windows []item
	for _, t := range due {
		for _, w := range a.windows(t, now, true) {
			windows = append(windows, newItem(nil, &w, nil))
		}
	}
	a.queue(windows...)
	a.mu.Lock()
	for _, t := range due {
		t.final = true
	}
	a.mu.Unlock()
	signal(a.sendReady) // it may be prunable already: the connection goroutine looks
}

// prune forgets the retired breakers that need no declaring any more.
func (a *Agent) prune() {
	a.queueMu.Lock()
	defer a.queueMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruneRetiredLocked()
}

// pruneRetiredLocked forgets every retired breaker whose last report is
// queued and about which nothing is left in the inbox or the outbox, and
// moves the hello generation on if it forgot one. a.queueMu (so that
// nothing is queued meanwhile) and a.mu must be held.
func (a *Agent) pruneRetiredLocked() {
	if len(a.retired) == 0 {
		return
	}
	n := len(a.retired)
	a.retired = slices.DeleteFunc(a.retired, func(t *tracked) bool {
		if !t.final || a.inbox.mentions(t.cfg.Name) || a.out.mentions(t.cfg.Name) {
			return false
		}
		if t.b != nil { // a Source of another library is not revived
			a.forgotten.put(t.b, t.rep)
		}
		return true
	})
	if len(a.retired) < n {
		a.helloGen++
	}
}

// forgottenReports remembers, for each pruned breaker that is still alive,
// where its reports stopped, so that registering it again goes on from
// there instead of reporting its calls twice. It holds the breakers weakly:
// an entry goes when its breaker is garbage collected (an evicted
// per-host breaker usually is), so it never keeps a breaker alive. It is
// safe for concurrent use.
type forgottenReports struct {
	mu sync.Mutex
	m  map[weak.Pointer[breaker.Breaker]]*forgotten
}

// forgotten is one entry: it lives as long as its breaker, so that each
// breaker gets one cleanup however often it is registered again.
type forgotten struct {
	rep reportState
	ok  bool // rep is where the reports stopped; false once taken back
}

func (f *forgottenReports) put(b *breaker.Breaker, rep reportState) {
	key := weak.Make(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[weak.Pointer[breaker.Breaker]]*forgotten)
	}
	e := f.m[key]
	if e == nil {
		e = &forgotten{}
		f.m[key] = e
		runtime.AddCleanup(b, f.forget, key)
	}
	e.rep, e.ok = rep, true
}

// take returns where b's reports stopped, if it was pruned since it was
// last registered.
func (f *forgottenReports) take(b *breaker.Breaker) (reportState, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.m[weak.Make(b)]
	if e == nil || !e.ok {
		return reportState{}, false
	}
	e.ok = false
	return e.rep, true
}

func (f *forgottenReports) forget(key weak.Pointer[breaker.Breaker]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
}

// len returns how many breakers are remembered.
func (f *forgottenReports) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}
