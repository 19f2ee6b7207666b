'use strict';
// The cbdash agent for Node: one websocket to a collector (cbdash.v1, see
// docs/protocol.md), numbered batches resent until acknowledged, a bounded
// outbox, failover across several collector URLs, operator commands
// applied at most once per id. Nothing it does can throw into the
// service, block it or leave a promise rejected unhandled: every callback
// of a socket, timer or breaker event is guarded, and a failure is logged.

const os = require('os');
const http = require('http');
const https = require('https');
const WebSocket = require('ws');
const P = require('./protocol');
const { Outbox } = require('./outbox');

const VERSION = require('../package.json').version;
const HUNDRED_YEARS_MS = 100 * 365.25 * 24 * 3600 * 1000;
const REMEMBERED_COMMANDS = 4096;
const REFUSED_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH']);

const defaults = {
  reportIntervalMs: 1000,
  idleReportMs: 10000,
  maxBufferBytes: 4 << 20,
  handshakeTimeoutMs: 10000,
  writeTimeoutMs: 10000,
  ackTimeoutMs: 30000,
  minBackoffMs: 250,
  maxBackoffMs: 30000,
  failbackAfterMs: 30000
};

// readyzURL is the /readyz of the collector whose agent URL is u: ws://
// made http://, wss:// https://, and /api/v1/agent (and what follows) in
// its path made /readyz (as sdk/agent's readyzURL).
function readyzURL (u) {
  const url = new URL(u);
  url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  const i = url.pathname.indexOf('/api/v1/agent');
  const prefix = i >= 0 ? url.pathname.slice(0, i) : '';
  url.pathname = prefix.replace(/\/$/, '') + '/readyz';
  url.search = '';
  url.hash = '';
  return url.toString();
}

// fnv1a32 is FNV-1a (32 bits) of service, a zero byte and instance: the
// first URL an instance tries, as sdk/agent picks it.
function fnv1a32 (service, instance) {
  let h = 0x811c9dc5;
  const bytes = Buffer.concat([Buffer.from(service), Buffer.from([0]), Buffer.from(instance)]);
  for (const b of bytes) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

class Agent {
  // See index.d.ts (AgentOptions) for the options, their units and defaults.
  constructor (opts = {}) {
    const o = { ...defaults, ...opts };
    const urls = o.urls || (o.url ? [o.url] : []);
    if (!Array.isArray(urls) || urls.length === 0) throw new TypeError('cbdash agent: give url or urls (ws:// or wss://)');
    for (const u of urls) {
      if (!/^wss?:\/\/[^/]+/.test(String(u))) throw new TypeError(`cbdash agent: ${u} is not a ws:// or wss:// URL`);
    }
    P.checkName('service', o.service);
    if (o.service.includes('/')) throw new TypeError('cbdash agent: service may not contain "/"');
    o.instance = o.instance || `${os.hostname()}-${process.pid}`;
    P.checkName('instance', o.instance);
    for (const [k, v] of Object.entries(o.labels || {})) {
      P.checkName(`label ${k}`, k);
      P.checkName(`label ${k}'s value`, v);
    }
    this.opts = o;
    this.urls = urls.map(String);
    this.urlIndex = fnv1a32(o.service, o.instance) % this.urls.length;
    this.preferred = this.urlIndex;
    this.now = o.now || Date.now;
    this.log = o.logger || { warn: (...a) => console.warn('cbdash agent:', ...a), error: (...a) => console.error('cbdash agent:', ...a), debug: () => {} };
    this.startedAt = this.now();
    this.outbox = new Outbox(o.maxBufferBytes, this.now);
    this.sources = new Map(); // name -> {src, last}
    this.retired = new Map(); // name -> {config, untilSeq}
    this.results = new Map(); // command id -> result (insertion order: oldest first)
    this.conn = null;
    this.started = false;
    this.closed = false;
    this.failures = 0;
    this.retryAfterInARow = 0;
    this.failingSince = 0;
    this.failedSinceWarn = 0;
    this.lastWarnAt = 0;
    this.kicked = false;
    this.timers = new Set();
    this.stats = { connects: 0, welcomes: 0, acks: 0, refusedBatches: 0, commands: 0, errors: 0, longestTaskMs: 0 };
  }

  // start connects and starts the report tick; it returns this.
  start () {
    if (this.started || this.closed) return this;
    this.started = true;
    this.tick = setInterval(() => this._guard('report', () => this._report(false)), this.opts.reportIntervalMs);
    this.tick.unref();
    this._connect();
    return this;
  }

  // register reports a source (see opossum.js and source.js) under its
  // name; a second source of the same name throws.
  _registerSource (src) {
    const name = src.name;
    P.checkName('breaker name', name);
    if (this.sources.has(name)) throw new Error(`cbdash agent: a breaker named ${name} is already registered`);
    if (this.sources.size >= 1000) throw new Error('cbdash agent: at most 1000 breakers');
    this.retired.delete(name);
    const entry = { src, last: null };
    this.sources.set(name, entry);
    entry.last = this._baseline(src, this.now());
    src._attach({
      transition: t => this._guard('transition', () => this._transition(entry, t)),
      log: this.log
    });
    this._rehello();
    return src;
  }

  // _unregisterSource sends the source's last window and stops reporting
  // it; it is declared until that window is acknowledged.
  _unregisterSource (name) {
    const entry = this.sources.get(name);
    if (!entry) return false;
    this._windowOf(entry, this.now(), true);
    this.sources.delete(name);
    this._guard('detach', () => entry.src._detach());
    this.retired.set(name, this._config(entry.src));
    this._kick();
    return true;
  }

  _baseline (src, at) {
    return { at, counts: P.zeroCounts(), latency: new Array(P.NUM_LATENCY_BUCKETS).fill(0), latencySum: 0, state: null, inFlight: 0 };
  }

  _config (src) {
    const c = src.describe();
    return { ...c, name: src.name };
  }

  _hello () {
    const breakers = [];
    for (const { src } of this.sources.values()) {
      try {
        breakers.push(this._config(src));
      } catch (e) {
        this.log.warn(`breaker ${src.name}: describe failed: ${e && e.message}`);
      }
    }
    for (const config of this.retired.values()) breakers.push(config);
    const h = {
      type: 'hello', protocol: P.PROTOCOL, service: this.opts.service, instance: this.opts.instance,
      sdk_version: `node-${VERSION}`, started_at: this.startedAt, breakers
    };
    if (this.opts.labels && Object.keys(this.opts.labels).length) h.labels = this.opts.labels;
    return h;
  }

  _rehello () {
    const c = this.conn;
    if (c && c.welcomed) this._send(c, JSON.stringify(this._hello()));
  }

  // _transition queues a transition and sends it at once.
  _transition (entry, t) {
    this.outbox.addTransition({ breaker: entry.src.name, ...t });
    this._kick();
  }

  // _report forms the window of every breaker with activity (all of them
  // when final) and sends what it can.
  _report (final) {
    const now = this.now();
    for (const entry of this.sources.values()) this._windowOf(entry, now, final);
    this._watchdog(now);
    this._retireAcked();
    this._flush();
  }

  _windowOf (entry, now, force) {
    let s;
    try {
      s = entry.src.snapshot(now);
    } catch (e) {
      this.log.warn(`breaker ${entry.src.name}: snapshot failed: ${e && e.message}`);
      return;
    }
    const last = entry.last;
    const counts = {};
    let changed = false;
    for (const k of P.COUNT_KEYS) {
      counts[k] = s.counts[k] - last.counts[k];
      if (counts[k] !== 0) changed = true;
    }
    const latency = s.latency.map((n, i) => n - last.latency[i]);
    const hasLatency = latency.some(n => n !== 0);
    const active = changed || hasLatency || s.state !== last.state || s.inFlight !== last.inFlight;
    if (!active && !force && now - last.at < this.opts.idleReportMs) return;
    if (now <= last.at) return;
    const w = {
      breaker: entry.src.name,
      start: last.at,
      duration_ms: now - last.at,
      state: s.state,
      counts,
      in_flight: s.inFlight,
      latency_sum_ms: Math.max(0, Math.round((s.latencySum - last.latencySum) * 1000) / 1000),
      headroom: s.headroom
    };
    if (hasLatency) w.latency = latency;
    if (s.forcedUntil) w.forced_until = s.forcedUntil;
    // A report never spans more than an hour: a quiet hour is cut there.
    if (w.duration_ms > P.LIMITS.maxWindowMs) {
      w.start = now - P.LIMITS.maxWindowMs;
      w.duration_ms = P.LIMITS.maxWindowMs;
    }
    this.outbox.addWindow(w);
    entry.last = { at: now, counts: { ...s.counts }, latency: s.latency.slice(), latencySum: s.latencySum, state: s.state, inFlight: s.inFlight };
  }

  // _retireAcked stops declaring unregistered breakers once everything
  // the agent held is acknowledged (their last reports with it).
  _retireAcked () {
    if (this.retired.size === 0 || this.outbox.inflight.length > 0 || this.outbox.hasPending()) return;
    this.retired.clear();
    this._rehello();
  }

  // _kick sends what waits on the next turn of the event loop (a
  // transition or a command result is not held until the next report).
  _kick () {
    if (this.kicked || this.closed) return;
    this.kicked = true;
    setImmediate(() => {
      this.kicked = false;
      this._guard('flush', () => this._flush());
    });
  }

  _flush () {
    const c = this.conn;
    if (!c || !c.welcomed || c.closing || c.draining) return;
    for (;;) {
      const b = this.outbox.take();
      if (!b) return;
      if (this.outbox.inflight.length === 1) c.waitingSince = this.now();
      this._send(c, b.json);
    }
  }

  _send (c, json) {
    c.writes.push(this.now());
    try {
      c.ws.send(json, err => {
        c.writes.shift();
        if (err) this._fail(c, `write failed: ${err.message}`);
      });
    } catch (e) {
      this._fail(c, `write failed: ${e.message}`);
    }
  }

  // _watchdog ends a connection whose writes do not complete, whose
  // welcome does not come, or that acknowledges nothing for too long.
  _watchdog (now) {
    const c = this.conn;
    if (!c || c.closing) return;
    if (c.writes.length > 0 && now - c.writes[0] > this.opts.writeTimeoutMs) {
      this._fail(c, `a write took over ${this.opts.writeTimeoutMs} ms`);
    } else if (c.welcomed && this.outbox.inflight.length > 0 && now - c.waitingSince > this.opts.ackTimeoutMs) {
      this._fail(c, `no ack for ${this.opts.ackTimeoutMs} ms`);
    }
  }

  _connect () {
    if (this.closed) return;
    const url = this.urls[this.urlIndex];
    const c = { url, ws: null, opened: false, welcomed: false, closing: false, progressed: false, writes: [], waitingSince: 0, fatal: null, cause: '' };
    this.conn = c;
    this.stats.connects++;
    let ws;
    try {
      ws = new WebSocket(url, P.SUBPROTOCOL, {
        headers: this.opts.token ? { Authorization: `Bearer ${this.opts.token}` } : {},
        maxPayload: P.LIMITS.maxMessageBytes,
        handshakeTimeout: this.opts.handshakeTimeoutMs,
        perMessageDeflate: false,
        ...(this.opts.wsOptions || {})
      });
    } catch (e) {
      c.cause = e.message;
      this._closed(c);
      return;
    }
    c.ws = ws;
    ws.on('error', e => this._guard('socket error', () => {
      if (!c.opened && e && REFUSED_CODES.has(e.code)) c.refusedDial = true;
      c.cause = c.cause || (e && e.message) || 'socket error';
    }));
    ws.on('open', () => this._guard('open', () => this._opened(c)));
    ws.on('message', (data, isBinary) => this._guard('message', () => this._message(c, data, isBinary)));
    ws.on('close', () => this._guard('close', () => this._closed(c)));
    // The agent never keeps the process alive (unref: false to let it).
    if (this.opts.unref !== false && ws._req) ws._req.on('socket', s => s.unref());
  }

  _opened (c) {
    c.opened = true;
    if (c.ws.protocol !== P.SUBPROTOCOL) {
      this._fail(c, `the collector selected subprotocol "${c.ws.protocol}", not ${P.SUBPROTOCOL}`);
      return;
    }
    const h = this._hello();
    c.declared = h.breakers.map(b => b.name).join('\n');
    this._send(c, JSON.stringify(h));
    c.welcomeTimer = this._timer(() => {
      if (!c.welcomed) this._fail(c, `no welcome within ${this.opts.handshakeTimeoutMs} ms`);
    }, this.opts.handshakeTimeoutMs);
  }

  _message (c, data, isBinary) {
    if (c !== this.conn || c.closing) return;
    if (isBinary) {
      this.log.warn('ignored a binary frame from the collector');
      return;
    }
    let m;
    try {
      m = JSON.parse(data.toString());
    } catch (e) {
      this.log.warn(`ignored a malformed message from the collector: ${e.message}`);
      return;
    }
    if (!m || typeof m !== 'object') return;
    switch (m.type) {
      case 'welcome': return this._welcome(c, m);
      case 'ack': return this._ack(c, m);
      case 'error': return this._error(c, m);
      case 'command': return this._command(m);
      default: this.log.debug?.(`ignored a message of type ${m.type}`);
    }
  }

  _welcome (c, m) {
    if (c.welcomed) return;
    c.welcomed = true;
    this.stats.welcomes++;
    clearTimeout(c.welcomeTimer);
    const last = Number.isSafeInteger(m.last_seq) && m.last_seq > 0 ? m.last_seq : 0;
    this.outbox.acked(last, true);
    c.waitingSince = this.now();
    if (this.outbox.inflight.length === 0) c.progressed = true;
    // a breaker registered between the hello and the welcome is declared
    // before any batch reports it
    const h = this._hello();
    if (h.breakers.map(b => b.name).join('\n') !== c.declared) this._send(c, JSON.stringify(h));
    for (const b of this.outbox.inflight) this._send(c, b.json); // resent byte for byte, in order
    this._flush();
    if (this.urlIndex !== this.preferred && this.opts.failbackAfterMs > 0) this._failbackChecks(c);
  }

  // _failbackChecks asks the preferred collector's /readyz about every
  // third of failbackAfterMs (drawn within ±25% for this connection);
  // after 3 ready answers in a row spanning failbackAfterMs the agent
  // stops sending batches, waits (at most 10 s) for the acks of what it
  // sent, closes this connection normally and connects to the preferred
  // one at once, keeping its outbox (docs/protocol.md, Failing back).
  _failbackChecks (c) {
    const target = readyzURL(this.urls[this.preferred]);
    const period = this.opts.failbackAfterMs / 3 * (0.75 + Math.random() / 2);
    let ready = 0;
    let since = 0;
    const check = () => {
      if (c !== this.conn || c.closing || this.closed) return;
      const mod = target.startsWith('https:') ? https : http;
      let answered = false;
      const done = ok => {
        if (answered) return;
        answered = true;
        if (c !== this.conn || c.closing || this.closed) return;
        if (!ok) ready = 0;
        else if (ready++ === 0) since = this.now();
        if (ready >= 3 && this.now() - since >= this.opts.failbackAfterMs) this._failBack(c);
        else this._timer(check, period);
      };
      try {
        const req = mod.get(target, { agent: false, timeout: Math.min(period, 5000) }, res => {
          res.resume();
          done(res.statusCode === 200);
        });
        req.on('timeout', () => req.destroy());
        req.on('error', () => done(false));
      } catch {
        done(false);
      }
    };
    this._timer(check, period);
  }

  _failBack (c) {
    c.draining = true;
    const deadline = this.now() + 10000;
    const wait = () => {
      if (c !== this.conn || c.closing || this.closed) return;
      if (this.outbox.inflight.length > 0 && this.now() < deadline) {
        this._timer(wait, 20);
        return;
      }
      this.log.warn(`moving back to the preferred collector ${this.urls[this.preferred]}`);
      c.failback = true;
      c.closing = true;
      try { c.ws.close(1000); } catch { /* closed */ }
      this._timer(() => { try { c.ws.terminate(); } catch { /* closed */ } }, 1000);
    };
    wait();
  }

  _ack (c, m) {
    if (!Number.isSafeInteger(m.seq)) return;
    this.stats.acks++;
    this.outbox.acked(m.seq, false);
    c.progressed = true;
    c.waitingSince = this.now();
    this.retryAfterInARow = 0;
    if (this.failures > 0 || this.failingSince) this._recovered();
    this._retireAcked();
    this._flush(); // room may have come back
  }

  _error (c, m) {
    const reason = String(m.reason || '');
    if (Number.isSafeInteger(m.seq) && !m.fatal) {
      this.stats.refusedBatches++;
      this.log.warn(`the collector refused batch ${m.seq}: ${reason}`);
      this.outbox.refused(m.seq);
      this._flush();
      return;
    }
    if (m.fatal) {
      c.fatal = { retry: !!m.retry, retryAfterMs: Number(m.retry_after_ms) || 0, reason };
      if (!m.retry) this.log.error(`the collector refused this agent for good: ${reason}`);
      return; // the collector closes the connection
    }
    this.log.warn(`the collector says: ${reason}`);
  }

  // _command applies an operator command at most once per id and queues
  // its result (the same result again for an id seen before).
  _command (m) {
    const id = m.id;
    if (typeof id !== 'string' || id === '') {
      this.log.warn('ignored a command without an id');
      return;
    }
    this.stats.commands++;
    const prior = this.results.get(id);
    if (prior) {
      this.outbox.addResult(prior);
      this._kick();
      return;
    }
    const at = this.now();
    const name = typeof m.breaker === 'string' ? m.breaker : '';
    const r = { id, breaker: name, ok: false, at };
    const entry = this.sources.get(name);
    const err = this._checkCommand(m, entry, at);
    if (err) {
      r.error = P.text(err);
      if (entry) r.state = this._state(entry);
    } else {
      try {
        const ttl = m.ttl_ms || 0;
        r.state = entry.src.apply({
          id, action: m.action, ttlMs: ttl, reason: m.reason ? P.text(m.reason) : '', actor: m.actor ? P.text(m.actor) : '', issuedAt: m.issued_at || 0
        }, at);
        r.ok = true;
      } catch (e) {
        r.error = P.text((e && e.message) || 'the command failed');
        r.state = this._state(entry);
      }
    }
    if (r.state === undefined) delete r.state;
    this.results.set(id, r);
    if (this.results.size > REMEMBERED_COMMANDS) this.results.delete(this.results.keys().next().value);
    this.outbox.addResult(r);
    this._kick();
  }

  _checkCommand (m, entry, at) {
    for (const [k, t] of [['breaker', 'string'], ['action', 'string'], ['reason', 'string'], ['actor', 'string'], ['ttl_ms', 'number'], ['expires_at', 'number'], ['issued_at', 'number']]) {
      if (m[k] !== undefined && m[k] !== null && typeof m[k] !== t) return `malformed command: ${k} is not a ${t}`;
    }
    if (!P.ACTIONS.includes(m.action)) return `unknown action ${JSON.stringify(String(m.action ?? ''))}`;
    const ttl = m.ttl_ms || 0;
    if (ttl < 0) return `negative ttl_ms (${ttl})`;
    if (ttl > HUNDRED_YEARS_MS) return `ttl_ms ${ttl} is over 100 years`;
    if (m.expires_at && at > m.expires_at) return 'command expired before delivery';
    if (!entry) return `unknown breaker ${m.breaker}`;
    const why = entry.src.holdsUnsupported?.();
    if (why) return why;
    return '';
  }

  _state (entry) {
    try {
      return entry.src.snapshot(this.now()).state;
    } catch {
      return undefined;
    }
  }

  _fail (c, cause) {
    if (c.closing) return;
    c.cause = cause;
    c.closing = true;
    try {
      c.ws.terminate();
    } catch { /* closed already */ }
  }

  // _closed decides how long to wait before the next connection and to
  // which URL (docs/protocol.md, Reconnecting and Failing over).
  _closed (c) {
    if (c.done) return;
    c.done = true;
    clearTimeout(c.welcomeTimer);
    if (this.conn === c) this.conn = null;
    if (this.closed) return;
    if (c.progressed) this.failures = 0;
    if (c.failback) {
      this.urlIndex = this.preferred;
      this._timer(() => this._connect(), 0);
      return;
    }
    let wait;
    let sameURL = false;
    if (c.fatal && c.fatal.retry && c.fatal.retryAfterMs > 0 && this.retryAfterInARow < 5) {
      const r = Math.min(Math.max(c.fatal.retryAfterMs, 100), this.opts.maxBackoffMs);
      wait = r + Math.random() * r / 2;
      this.retryAfterInARow++;
      sameURL = true;
    } else if (c.fatal && !c.fatal.retry) {
      wait = this.opts.maxBackoffMs;
    } else {
      this.failures++;
      const d = Math.min(this.opts.minBackoffMs * 2 ** Math.min(this.failures - 1, 20), this.opts.maxBackoffMs);
      wait = d / 2 + Math.random() * d / 2;
      if (c.refusedDial) wait = Math.min(wait, 1000);
    }
    if (!c.progressed || c.fatal) this._warnFailure(c);
    if (!sameURL) this.urlIndex = (this.urlIndex + 1) % this.urls.length;
    this._timer(() => this._connect(), wait);
  }

  _warnFailure (c) {
    const now = this.now();
    this.failedSinceWarn++;
    if (!this.failingSince) {
      this.failingSince = now;
      this.lastWarnAt = now;
      this.failedSinceWarn = 0;
      this.log.warn(`cannot reach the collector at ${c.url}: ${c.fatal ? c.fatal.reason : c.cause || 'connection closed'}`);
    } else if (now - this.lastWarnAt >= 30000) {
      this.log.warn(`still cannot reach a collector (${this.failedSinceWarn} failures in ${Math.round((now - this.lastWarnAt) / 1000)} s; last at ${c.url}: ${c.fatal ? c.fatal.reason : c.cause || 'connection closed'})`);
      this.lastWarnAt = now;
      this.failedSinceWarn = 0;
    }
  }

  _recovered () {
    this.failures = 0;
    this.failingSince = 0;
  }

  _timer (fn, ms) {
    const t = setTimeout(() => {
      this.timers.delete(t);
      this._guard('timer', fn);
    }, ms);
    t.unref();
    this.timers.add(t);
    return t;
  }

  _guard (what, fn) {
    const t0 = performance.now();
    try {
      fn();
    } catch (e) {
      this.stats.errors++;
      try {
        this.log.warn(`${what}: ${e && e.stack ? e.stack : e}`);
      } catch { /* a logger that throws */ }
    } finally {
      const ms = performance.now() - t0;
      if (ms > this.stats.longestTaskMs) this.stats.longestTaskMs = ms;
    }
  }

  // close sends the last windows and waits up to timeoutMs (2000) for the
  // collector to acknowledge everything, then closes the connection. It
  // never rejects; it resolves to true when nothing was left unacknowledged.
  close (timeoutMs = 2000) {
    if (this.closed) return Promise.resolve(this.outbox.inflight.length === 0 && !this.outbox.hasPending());
    return new Promise(resolve => {
      this._guard('close', () => this._report(true));
      const deadline = this.now() + timeoutMs;
      const finish = () => {
        this.closed = true;
        clearInterval(this.tick);
        for (const t of this.timers) clearTimeout(t);
        this.timers.clear();
        for (const { src } of this.sources.values()) this._guard('detach', () => src._detach());
        const c = this.conn;
        this.conn = null;
        if (c && c.ws) {
          c.done = true;
          try { c.ws.close(1000); } catch { /* closed */ }
          setTimeout(() => { try { c.ws.terminate(); } catch { /* closed */ } }, 1000).unref();
        }
        resolve(this.outbox.inflight.length === 0 && !this.outbox.hasPending());
      };
      const poll = () => {
        this._guard('close', () => this._flush());
        if ((this.outbox.inflight.length === 0 && !this.outbox.hasPending()) || this.now() >= deadline) {
          finish();
        } else {
          setTimeout(poll, 20); // ref'd: an awaited close keeps the process for its (bounded) time
        }
      };
      poll();
    });
  }

  // connected says whether the agent is welcomed by a collector now.
  get connected () {
    return !!(this.conn && this.conn.welcomed && !this.conn.closing);
  }

  // state returns the agent's counters, for tests and health pages.
  status () {
    return {
      connected: this.connected,
      url: this.conn ? this.conn.url : null,
      nextSeq: this.outbox.nextSeq,
      unacked: this.outbox.inflight.length,
      pendingBytes: this.outbox.pendingBytes,
      inflightBytes: this.outbox.inflightBytes,
      dropped: { ...this.outbox.totals },
      ...this.stats
    };
  }
}

module.exports = { Agent, fnv1a32, readyzURL };
