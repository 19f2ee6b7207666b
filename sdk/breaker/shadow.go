package breaker

// This file holds the shadow configurations (Config.Shadows): breakers
// made of the live breaker's own code that are fed its outcomes and
// never reject. See Shadow for the semantics.

// newShadow returns the never-enforced breaker of shadow s of b: the
// same state machine on b's clock and time base, so that its times are
// b's.
func (b *Breaker) newShadow(s Shadow) *Breaker {
	c := s.Config
	c.Clock, c.Logger = b.cfg.Clock, b.cfg.Logger
	sh := &Breaker{
		name: b.name, shadow: s.Name, cfg: c, clock: b.clock, timers: b.timers, base: b.base,
		ctr: new(counters), slowNs: int64(c.SlowCallDuration), timeoutNs: int64(c.CallTimeout),
	}
	sh.expireFn = sh.expire
	sh.ep.Store(sh.newEpochLocked(Closed))
	return sh
}

// feedShadows tells each shadow of b of a call that ended at end (breaker
// time) after d ns with outcome o, counted on stripe st.
func (b *Breaker) feedShadows(o Outcome, d, end int64, st uint8) {
	if !o.recorded() {
		return
	}
	for _, sh := range b.shadows {
		sh.feed(o, d, end, st)
	}
}

// feed is a shadow's share of a recorded call of its live breaker. A
// closed shadow records the call; an open one would have rejected it and
// does not count it; a half-open one takes it as a probe if it has a free
// slot. Transitions are delivered after b.mu is released, by
// deliverShadow.
func (sh *Breaker) feed(o Outcome, d, end int64, st uint8) {
	if sh.timeoutNs > 0 && d >= sh.timeoutNs {
		o = Timeout
	}
	slow := sh.slowNs > 0 && d >= sh.slowNs
	ep := sh.ep.Load()
	if ep.due(end) {
		ep = sh.settleShadow(end)
	}
	switch ep.state {
	case Closed:
		if ep.ramp != nil && ep.ramp.active.Load() && !ep.ramp.admit(end) {
			return // its ramp would have rejected the call
		}
		s, judge := ep.win.record(end, o.failed(), slow, st)
		if judge && sh.trips(s) && sh.tripLocked(ep, end) {
			sh.deliverShadow()
		}
	case HalfOpen:
		if ok, _ := sh.takeProbe(ep); ok {
			sh.probeDoneLocked(ep, o, slow, end)
			sh.deliverShadow()
		}
	}
}

// settleShadow is settle for a shadow: the lazy transitions due at now,
// delivered by deliverShadow.
func (sh *Breaker) settleShadow(now int64) *epoch {
	ep := func() *epoch {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.settleLocked(now)
	}()
	sh.deliverShadow()
	return ep
}

// deliverShadow delivers a shadow's queued transitions. Observers'
// panics are recovered by notify; should one still get out (the Logger
// panicking while it logs one), it stops here: a shadow never makes a
// call panic.
func (sh *Breaker) deliverShadow() {
	defer func() { _ = recover() }()
	sh.deliver()
}

// SubscribeShadows registers fn to be told of every would-be transition
// of the breaker's shadow configurations (Config.Shadows) from now on,
// with Transition.Shadow set to the shadow's name, and returns a
// function that unsubscribes it. The contract is Subscribe's (in order
// per shadow, outside any lock, fn must not block, its panics are
// recovered). Subscribe's observers never see shadow transitions. With
// no shadows, fn is never called.
func (b *Breaker) SubscribeShadows(fn func(Transition)) (cancel func()) {
	if len(b.shadows) == 0 {
		return func() {}
	}
	cancels := make([]func(), len(b.shadows))
	for i, sh := range b.shadows {
		cancels[i] = sh.Subscribe(fn)
	}
	return func() {
		for _, c := range cancels {
			c()
		}
	}
}

// ShadowSnapshot returns the state and sliding window now of the shadow
// called name (Totals and Latency are not kept for a shadow: they are
// the live breaker's), and false if the breaker has no such shadow.
// Like Snapshot, it makes due lazy transitions of that shadow.
func (b *Breaker) ShadowSnapshot(name string) (Snapshot, bool) {
	for _, sh := range b.shadows {
		if sh.shadow == name {
			now := b.now()
			ep := sh.ep.Load()
			if ep.due(now) {
				ep = sh.settleShadow(now)
			}
			return sh.snapshot(ep, now), true
		}
	}
	return Snapshot{}, false
}
