'use strict';
// A Source is what the agent reports: a breaker's cumulative counters and
// latency histogram (on cbdash's bounds), its state, and its transitions
// pushed as they happen. OpossumSource (opossum.js) and StatefulSource
// (below, for a hand-written breaker) are Sources.

const P = require('./protocol');

class Source {
  constructor (name) {
    this.name = name;
    this.counts = P.zeroCounts();
    this.latency = new Array(P.NUM_LATENCY_BUCKETS).fill(0);
    this.latencySum = 0;
    this.generation = 0;
    this.sink = null;
  }

  // ended counts a call that ended: outcome is 'success', 'error',
  // 'timeout', 'panic' or 'ignored'; ms its latency. admitted says whether
  // to count its admission too (false when admission was counted).
  ended (outcome, ms, admitted = true) {
    const c = this.counts;
    if (admitted) c.admitted++;
    switch (outcome) {
      case 'success': c.successes++; break;
      case 'ignored': c.ignored++; return;
      case 'timeout': c.timeouts++; c.failures++; break;
      case 'panic': c.panics++; c.failures++; break;
      default: c.errors++; c.failures++;
    }
    ms = Number(ms);
    if (!(ms >= 0)) ms = 0;
    this.latency[P.bucketOf(ms)]++;
    this.latencySum += ms;
  }

  // rejected counts a call refused: kind is 'open', 'half_open_full',
  // 'forced_open' or 'bulkhead'.
  rejected (kind) {
    this.counts['rejected_' + kind]++;
  }

  fallback (ok) {
    this.counts[ok ? 'fallback_successes' : 'fallback_failures']++;
  }

  // push reports a transition {from, to, at, cause, open_ms?}.
  push (t) {
    if (t.from === t.to) return;
    this.generation++;
    const w = { from: t.from, to: t.to, at: t.at || Date.now(), generation: this.generation, cause: t.cause };
    if (t.open_ms !== undefined && t.to === 'open') w.open_ms = Math.max(0, Math.round(t.open_ms));
    if (this.sink) this.sink.transition(w);
  }

  _attach (sink) { this.sink = sink; }
  _detach () { this.sink = null; }
  holdsUnsupported () { return ''; }
}

const STATES = new Map([
  ['closed', 'closed'], ['open', 'open'], ['half_open', 'half_open'], ['half-open', 'half_open'], ['halfopen', 'half_open'],
  ['forced_open', 'forced_open'], ['forced_closed', 'forced_closed']
]);

// wireState maps a state as a hand-written breaker may name it
// ('CLOSED', 'half-open', 'HalfOpen'...) to the protocol's.
function wireState (s) {
  return knownState(s) || 'closed';
}

// knownState is wireState's answer, or undefined for a name it does not
// know.
function knownState (s) {
  const k = String(s).replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase();
  return STATES.get(k);
}

// StatefulSource reports a hand-written breaker: one that has a `state`
// and calls back on each transition. See index.d.ts (registerBreaker).
class StatefulSource extends Source {
  constructor (breaker, opts) {
    super(opts.name || breaker.name);
    this.breaker = breaker;
    this.opts = opts;
    this.unsubscribe = null;
    this.inFlight = 0;
    this.lastState = wireState(breaker.state);
    this.warned = new Set(); // what was said once to the log
  }

  // warnOnce logs msg the first time key is seen.
  warnOnce (key, msg) {
    if (this.warned.has(key) || !this.sink) return;
    this.warned.add(key);
    this.sink.log.warn(`breaker ${this.name}: ${msg}`);
  }

  // stateName maps s as wireState does, saying once in the log when it is
  // a name cbdash does not know (then read as closed).
  stateName (s) {
    const k = knownState(s);
    if (!k) this.warnOnce(`state ${s}`, `unknown state ${JSON.stringify(String(s))} read as closed (known: closed, open, half-open, forced_open, forced_closed, in any case)`);
    return k || 'closed';
  }

  _attach (sink) {
    super._attach(sink);
    const on = (from, to) => {
      try {
        const f = this.stateName(to === undefined ? this.lastState : from);
        const t = this.stateName(to === undefined ? from : to);
        this.lastState = t;
        const cause = { kind: t === 'open' && f === 'half_open' ? 'probe_failed' : t === 'open' ? 'library_rule' : t === 'half_open' ? 'open_elapsed' : f === 'half_open' ? 'probes_succeeded' : 'library_rule' };
        if (cause.kind === 'probe_failed') cause.probe_outcome = 'error';
        this.push({ from: f, to: t, at: Date.now(), cause, open_ms: this.opts.openMs });
      } catch (e) {
        sink.log.warn(`breaker ${this.name}: transition: ${e && e.message}`);
      }
    };
    const b = this.breaker;
    if (typeof b.onTransition === 'function') {
      const off = b.onTransition(on);
      this.unsubscribe = typeof off === 'function' ? off : null;
    } else if (typeof b.on === 'function') {
      const l = (from, to) => on(from, to);
      b.on('transition', l);
      this.unsubscribe = () => b.off('transition', l);
    } else {
      this.warnOnce('no transitions', 'has neither onTransition(fn) nor on(\'transition\', fn): its state is reported, its transitions are not');
    }
  }

  _detach () {
    super._detach();
    try { this.unsubscribe?.(); } catch { /* the breaker's own */ }
  }

  // call runs fn (sync or async) as one counted call: the breaker decides
  // nothing here, it only measures. It returns what fn returns. A call
  // that fails is a rejection, not a failure, when opts.isRejection(err)
  // says so, or, without isRejection, when the breaker was open as the
  // call began (a breaker that is open refuses calls without making
  // them).
  call (fn) {
    const start = Date.now();
    let wasOpen = false;
    try { wasOpen = wireState(this.breaker.state) === 'open'; } catch { /* the breaker's own getter */ }
    this.inFlight++;
    const done = (err, failed) => {
      this.inFlight--;
      if (failed && this.isRejection(err, wasOpen)) {
        this.rejected('open');
        return;
      }
      this.ended(failed ? 'error' : 'success', Date.now() - start, true);
    };
    let r;
    try {
      r = fn();
    } catch (e) {
      done(e, true);
      throw e;
    }
    if (r && typeof r.then === 'function') {
      r.then(() => done(undefined, false), e => done(e, true));
    } else {
      done(undefined, false);
    }
    return r;
  }

  isRejection (err, wasOpen) {
    const f = this.opts.isRejection;
    if (typeof f !== 'function') return wasOpen;
    try {
      return Boolean(f(err));
    } catch (e) {
      this.warnOnce('isRejection threw', `isRejection threw (${e && e.message}): the call counted as a failure`);
      return false;
    }
  }

  describe () {
    return {
      name: this.name, window_kind: '', window_size: 0, failure_rate_threshold: 0, slow_call_duration_ms: 0,
      slow_call_rate_threshold: 0, minimum_calls: 0, open_duration_ms: Math.max(0, Math.round(this.opts.openMs || 0)),
      half_open_max_calls: 1, half_open_success_threshold: 1, library: this.opts.library || 'hand-written',
      holds_unsupported: true
    };
  }

  holdsUnsupported () { return 'a hand-written breaker cannot be held by the agent'; }

  snapshot () {
    const state = wireState(this.breaker.state);
    return {
      state, counts: this.counts, latency: this.latency, latencySum: this.latencySum, inFlight: this.inFlight,
      headroom: { calls: 0, failures: 0, slow: 0, minimum_calls: 0, failure_rate: 0, failure_rate_threshold: 0, slow_call_rate: 0, slow_call_rate_threshold: 0 }
    };
  }
}

module.exports = { Source, StatefulSource, wireState };
