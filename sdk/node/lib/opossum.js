'use strict';
// OpossumSource reports an opossum CircuitBreaker to cbdash from its own
// events and applies operator holds through its own open(), close(),
// disable() and enable(). What each event counts (docs in README.md):
//
//   success          successes (latency from opossum's event)
//   failure          errors (not for a timeout or a semaphore rejection,
//                    which opossum also reports as a failure)
//   timeout          timeouts
//   reject           rejected_open (rejected_half_open_full while
//                    half-open, rejected_forced_open while held open)
//   semaphoreLocked  rejected_bulkhead
//   fallback         fallback_successes or fallback_failures, as the
//                    fallback's promise settles
//   open, halfOpen, close   transitions, pushed as they happen
//
// admitted is counted when the call ends (opossum tells no admission), so
// admitted = successes + failures of the same reports.

const { Source } = require('./source');

const path = require('path');
const fs = require('fs');

// opossumVersion is the version of the opossum that made breaker: the
// package.json above the module (in require.cache) whose export is the
// breaker's class, so that an agent installed as a link, with an opossum
// of its own for its tests, reports the service's opossum; else the one
// the service's main module resolves; else the one this package
// resolves; '' when none is found.
function opossumVersion (breaker) {
  try {
    const ctor = breaker && breaker.constructor;
    for (const m of Object.values(require.cache)) {
      if (!m || !m.filename || (m.exports !== ctor && m.exports?.default !== ctor)) continue;
      for (let dir = path.dirname(m.filename); dir !== path.dirname(dir); dir = path.dirname(dir)) {
        const f = path.join(dir, 'package.json');
        if (!fs.existsSync(f)) continue;
        const pkg = JSON.parse(fs.readFileSync(f, 'utf8'));
        if (pkg.name === 'opossum' && pkg.version) return pkg.version;
      }
    }
  } catch { /* fall back to resolving it */ }
  for (const from of [require.main?.path, process.cwd(), __dirname]) {
    if (!from) continue;
    try {
      return require(require.resolve('opossum/package.json', { paths: [from] })).version || '';
    } catch { /* next */ }
  }
  return '';
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

function libState (b) {
  if (b.opened) return 'open';
  if (b.halfOpen) return 'half_open';
  return 'closed';
}

function ms (v) {
  const n = Number(v);
  return Number.isFinite(n) && n > 0 ? Math.round(n) : 0;
}

class OpossumSource extends Source {
  // breaker is an opossum CircuitBreaker; opts.name (default its name),
  // opts.library (default "opossum <version>"), opts.holds (false: declare
  // holds_unsupported and refuse commands).
  constructor (breaker, opts = {}) {
    super(opts.name || breaker.name);
    if (!breaker || typeof breaker.on !== 'function' || typeof breaker.fire !== 'function') {
      throw new TypeError('cbdash: register takes an opossum CircuitBreaker');
    }
    this.b = breaker;
    this.opts = opts;
    this.state = libState(breaker); // opossum's state as last seen
    this.hold = null; // {state, cmd, until, timer}
    this.applying = false;
    this.counted = new WeakSet(); // errors of timeouts and semaphore rejections, counted already
    this.fires = 0; // fires while enabled, for in_flight
    this.settled = 0; // fires that ended or were refused
    this.forcedInFlight = 0;
    this.lastFailure = 'error';
    this.judging = false;
    this.listeners = [];
    this.origAction = null;
  }

  // libraryName is "opossum <version>" of the opossum that made the
  // breaker (looked up once), or "opossum".
  libraryName () {
    if (this.library === undefined) {
      const v = opossumVersion(this.b);
      this.library = v ? `opossum ${v}` : 'opossum';
    }
    return this.library;
  }

  holdsUnsupported () {
    if (this.opts.holds === false) return 'holds are turned off for this opossum breaker (register option holds: false)';
    for (const m of ['open', 'close', 'disable', 'enable']) {
      if (typeof this.b[m] !== 'function') return `this opossum breaker has no ${m}(): it cannot be held`;
    }
    if (this.b.isShutdown) return 'the opossum breaker is shut down';
    return '';
  }

  _on (event, fn, prepend) {
    const l = (...args) => {
      try {
        fn(...args);
      } catch (e) {
        try { this.sink?.log.warn(`breaker ${this.name}: ${event}: ${e && e.message}`); } catch { /* logger */ }
      }
    };
    if (prepend) this.b.prependListener(event, l);
    else this.b.on(event, l);
    this.listeners.push([event, l]);
  }

  _attach (sink) {
    super._attach(sink);
    const skip = v => {
      if (v !== null && (typeof v === 'object' || typeof v === 'function') && this.counted.has(v)) {
        this.counted.delete(v);
        return true;
      }
      return false;
    };
    this._on('fire', () => { if (this.b.enabled) this.fires++; });
    this._on('cacheHit', () => { this.settled++; });
    this._on('coalesceCacheHit', () => { this.settled++; });
    this._on('success', (result, latency) => {
      if (skip(result)) return;
      this.settled++;
      this.ended('success', latency);
    });
    this._on('failure', (err, latency) => {
      if (skip(err)) return;
      this.settled++;
      this.ended('error', latency);
      this._judging('error');
    });
    this._on('timeout', (err, latency) => {
      if (err && typeof err === 'object') this.counted.add(err);
      this.settled++;
      this.ended('timeout', latency);
      this._judging('timeout');
    });
    this._on('reject', () => {
      this.settled++;
      if (this.hold && this.hold.state === 'forced_open') this.rejected('forced_open');
      else if (this.state === 'half_open') this.rejected('half_open_full');
      else this.rejected('open');
    });
    this._on('semaphoreLocked', err => {
      if (err && typeof err === 'object') this.counted.add(err);
      this.settled++;
      this.rejected('bulkhead');
    });
    this._on('fallback', result => {
      if (result && typeof result.then === 'function') {
        result.then(() => this.fallback(true), () => this.fallback(false));
      } else {
        this.fallback(true);
      }
    });
    // Held open, opossum's reset timer must not let a probe through: this
    // listener runs first and opens it again at once.
    this._on('halfOpen', () => {
      if (this.hold && this.hold.state === 'forced_open') {
        this.state = 'half_open';
        this._applyingDo(() => this.b.open());
        return;
      }
      this._lib('half_open');
    }, true);
    this._on('open', () => this._lib('open'));
    this._on('close', () => this._lib('closed'));
  }

  _detach () {
    super._detach();
    for (const [e, l] of this.listeners) this.b.removeListener(e, l);
    this.listeners = [];
    if (this.hold) this._endHold();
  }

  // _judging marks the failure opossum is judging now: an open in the
  // same turn is its failure-rate rule.
  _judging (kind) {
    this.lastFailure = kind;
    this.judging = true;
    queueMicrotask(() => { this.judging = false; });
  }

  _lib (to) {
    const from = this.state;
    this.state = to;
    if (this.hold || this.applying || from === to) return;
    const t = { from, to, at: Date.now() };
    if (to === 'open') {
      t.open_ms = ms(this.b.options.resetTimeout);
      if (from === 'half_open') {
        t.cause = { kind: 'probe_failed', probe_outcome: this.lastFailure };
      } else if (this.judging) {
        t.cause = { kind: 'failure_rate', threshold: this._threshold(), ...this._window() };
        t.cause.failure_rate = t.cause.window_calls ? Math.min(100, t.cause.window_failures * 100 / t.cause.window_calls) : 0;
      } else {
        t.cause = { kind: 'library_rule' }; // open() called by the service, a health check...
      }
    } else if (to === 'half_open') {
      t.cause = { kind: 'open_elapsed' };
    } else {
      t.cause = { kind: from === 'half_open' ? 'probes_succeeded' : 'library_rule' };
    }
    this.push(t);
  }

  _threshold () {
    return Math.min(100, Math.max(0, Number(this.b.options.errorThresholdPercentage) || 0));
  }

  // _window sums opossum's rolling window (what it judges): fires and
  // failures.
  _window () {
    let calls = 0;
    let failures = 0;
    const w = this.b.status && this.b.status.window;
    if (Array.isArray(w)) {
      for (const bucket of w) {
        if (!bucket) continue;
        calls += bucket.fires || 0;
        failures += bucket.failures || 0;
      }
    }
    return { window_calls: calls, window_failures: Math.min(failures, calls) };
  }

  describe () {
    const o = this.b.options || {};
    const capacity = Number.isInteger(o.capacity) && o.capacity < MAX_SAFE ? o.capacity : 0;
    const settings = {
      timeout: String(o.timeout === false ? false : o.timeout),
      errorThresholdPercentage: String(o.errorThresholdPercentage),
      resetTimeout: String(o.resetTimeout),
      volumeThreshold: String(this.b.volumeThreshold ?? o.volumeThreshold ?? 0),
      rollingCountTimeout: String(o.rollingCountTimeout),
      rollingCountBuckets: String(o.rollingCountBuckets),
      capacity: capacity ? String(capacity) : 'unbounded',
      allowWarmUp: String(o.allowWarmUp === true),
      errorFilter: o.errorFilter && o.errorFilter.toString() !== '_ => false' ? 'custom' : 'none',
      cache: String(!!o.cache),
      coalesce: String(!!o.coalesce)
    };
    const c = {
      name: this.name,
      window_kind: 'time',
      window_size: 0,
      window_ms: ms(o.rollingCountTimeout),
      window_buckets: ms(o.rollingCountBuckets),
      failure_rate_threshold: this._threshold(),
      slow_call_duration_ms: 0,
      slow_call_rate_threshold: 0,
      minimum_calls: ms(this.b.volumeThreshold ?? o.volumeThreshold),
      open_duration_ms: ms(o.resetTimeout),
      half_open_max_calls: 1,
      half_open_success_threshold: 1,
      call_timeout_ms: ms(o.timeout),
      max_concurrent: capacity,
      library: this.opts.library || this.libraryName(),
      settings
    };
    if (this.holdsUnsupported()) c.holds_unsupported = true;
    return c;
  }

  snapshot (now = Date.now()) {
    if (this.hold && this.hold.until && now >= this.hold.until) this._expire();
    const state = this.hold ? this.hold.state : libState(this.b);
    const headroom = {
      calls: 0, failures: 0, slow: 0, minimum_calls: ms(this.b.volumeThreshold), failure_rate: 0,
      failure_rate_threshold: this._threshold(), slow_call_rate: 0, slow_call_rate_threshold: 0
    };
    if (state === 'closed') {
      const w = this._window();
      headroom.calls = w.window_calls;
      headroom.failures = w.window_failures;
      headroom.failure_rate = w.window_calls ? Math.min(100, w.window_failures * 100 / w.window_calls) : 0;
    }
    const s = {
      state, counts: this.counts, latency: this.latency, latencySum: this.latencySum,
      inFlight: Math.max(0, this.fires - this.settled) + this.forcedInFlight, headroom
    };
    if (this.hold && this.hold.until) s.forcedUntil = this.hold.until;
    return s;
  }

  _applyingDo (fn) {
    const was = this.applying;
    this.applying = true;
    try {
      fn();
    } finally {
      this.applying = was;
    }
  }

  // apply carries out an operator command (the agent has checked it) and
  // returns the state it leaves: force_open holds opossum open (every
  // call rejected, with its fallback), force_closed closes and disables
  // it (every call goes straight to the action, counted by the agent),
  // release and reset close it (and enable it) and empty its rolling
  // window. A TTL ends the hold when it runs out, whether or not the
  // collector is reachable (transition cause expired).
  apply (cmd, now = Date.now()) {
    if (this.hold && this.hold.until && now >= this.hold.until) this._expire();
    const from = this.hold ? this.hold.state : libState(this.b);
    let to = 'closed';
    if (cmd.action === 'force_open') to = 'forced_open';
    if (cmd.action === 'force_closed') to = 'forced_closed';
    const until = to !== 'closed' && cmd.ttlMs > 0 ? now + cmd.ttlMs : 0;
    this._applyingDo(() => {
      if (this.hold) this._endHold();
      if (to === 'forced_open') {
        this.b.open();
      } else {
        this.b.close();
        this._emptyWindow();
        if (to === 'forced_closed') this._disable();
      }
    });
    this.state = libState(this.b);
    if (to !== 'closed') {
      this.hold = { state: to, cmd, until, timer: null };
      if (until) {
        this.hold.timer = setTimeout(() => {
          try { this._expire(); } catch (e) { this.sink?.log.warn(`breaker ${this.name}: hold expiry: ${e && e.message}`); }
        }, until - now);
        this.hold.timer.unref();
      }
    }
    if (from !== to) {
      const cause = { kind: 'command', command_id: cmd.id, action: cmd.action };
      if (cmd.reason) cause.reason = cmd.reason;
      if (cmd.actor) cause.actor = cmd.actor;
      if (until) cause.expires_at = until;
      this.push({ from, to, at: now, cause });
    }
    return to;
  }

  // _expire ends a hold whose TTL ran out.
  _expire () {
    const h = this.hold;
    if (!h) return;
    this._applyingDo(() => {
      this._endHold();
      this.b.close();
    });
    this.state = libState(this.b);
    const cause = { kind: 'expired', command_id: h.cmd.id, action: h.cmd.action };
    if (h.cmd.reason) cause.reason = h.cmd.reason;
    if (h.cmd.actor) cause.actor = h.cmd.actor;
    this.push({ from: h.state, to: 'closed', at: h.until, cause });
  }

  _endHold () {
    const h = this.hold;
    this.hold = null;
    if (!h) return;
    clearTimeout(h.timer);
    if (h.state === 'forced_closed') this._enable();
  }

  // _disable turns opossum's protection off and counts the calls that go
  // straight to the action while held closed.
  _disable () {
    const b = this.b;
    const orig = b.action;
    const src = this;
    const measured = function (...args) {
      const start = Date.now();
      src.counts.admitted++;
      src.forcedInFlight++;
      const done = outcome => {
        src.forcedInFlight--;
        src.ended(outcome, Date.now() - start, false);
      };
      let r;
      try {
        r = orig.apply(this === measured ? orig : this, args);
      } catch (e) {
        done('error');
        throw e;
      }
      if (r && typeof r.then === 'function') r.then(() => done('success'), () => done('error'));
      else done('success');
      return r;
    };
    this.origAction = orig;
    b.action = measured;
    b.disable();
  }

  _enable () {
    if (this.origAction) {
      this.b.action = this.origAction;
      this.origAction = null;
    }
    this.b.enable();
  }

  // _emptyWindow empties opossum's rolling window (a reset's empty
  // window) by rotating out every bucket.
  _emptyWindow () {
    const st = this.b.status;
    const n = ms(this.b.options.rollingCountBuckets) || 10;
    if (st && typeof st.rotateBucket === 'function') for (let i = 0; i < n; i++) st.rotateBucket();
  }
}

module.exports = { OpossumSource };
