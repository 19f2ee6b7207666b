'use strict';
// The outbox holds everything the agent has for the collector: reports not
// yet in a batch (pending) and batches sent and not yet acknowledged
// (inflight), within maxBytes in all, the inflight batches within half of
// it (docs/protocol.md, "Never hurting the service"). Under pressure it
// merges window reports of one breaker into longer ones (counts kept,
// resolution lost), then drops the oldest window reports and says exactly
// what they held (dropped.windows, dropped.calls and a lost span per
// breaker), and only as a last resort transitions and command results.

const { LIMITS, COUNT_KEYS, callsOf } = require('./protocol');

// BATCH_BYTES bounds one batch's JSON, well under the 1 MiB frame limit.
const BATCH_BYTES = 900 * 1024;

function size (v) {
  return Buffer.byteLength(JSON.stringify(v));
}

function newDropped () {
  return { windows: 0, merged: 0, batches: 0, transitions: 0, command_results: 0, calls: 0, lost: [] };
}

class Outbox {
  // maxBytes bounds pending and inflight together; now() gives Unix ms.
  constructor (maxBytes, now) {
    this.maxBytes = maxBytes;
    this.now = now;
    this.batchBytes = Math.min(BATCH_BYTES, Math.floor(maxBytes / 4));
    this.transitions = []; // {v, bytes}
    this.windows = [];
    this.results = [];
    this.pendingBytes = 0;
    this.inflight = []; // {seq, json, bytes}, in seq order
    this.inflightBytes = 0;
    this.nextSeq = 1;
    this.dropped = newDropped();
    // totals since the start, for tests and stats()
    this.totals = newDropped();
    delete this.totals.lost;
  }

  addTransition (t) { this._add(this.transitions, t); }
  addWindow (w) { this._add(this.windows, w); }
  addResult (r) { this._add(this.results, r); }

  _add (list, v) {
    const bytes = size(v);
    list.push({ v, bytes });
    this.pendingBytes += bytes;
    this._enforce();
  }

  // hasPending says whether a batch could be formed now (ignoring room).
  hasPending () {
    return this.transitions.length > 0 || this.windows.length > 0 || this.results.length > 0 || this._droppedSomething();
  }

  _droppedSomething () {
    const d = this.dropped;
    return d.windows + d.merged + d.batches + d.transitions + d.command_results > 0 || d.lost.length > 0;
  }

  // take forms the next batch and returns {seq, json}, or null when there
  // is nothing to send or the inflight batches fill their half.
  take () {
    if (!this.hasPending() || this.inflightBytes >= this.maxBytes / 2) return null;
    const batch = { type: 'batch', seq: this.nextSeq, sent_at: this.now() };
    let bytes = 200;
    const pick = (list, max) => {
      const out = [];
      while (list.length > 0 && out.length < max && (out.length === 0 || bytes + list[0].bytes <= this.batchBytes)) {
        const it = list.shift();
        bytes += it.bytes + 1;
        this.pendingBytes -= it.bytes;
        out.push(it.v);
      }
      return out;
    };
    const ts = pick(this.transitions, LIMITS.maxTransitions);
    const ws = pick(this.windows, LIMITS.maxWindows);
    const rs = pick(this.results, LIMITS.maxCommandResults);
    if (ts.length) batch.transitions = ts;
    if (ws.length) batch.windows = ws;
    if (rs.length) batch.command_results = rs;
    if (this._droppedSomething()) {
      const d = this.dropped;
      this.dropped = newDropped();
      const out = { windows: d.windows, merged: d.merged, batches: d.batches };
      if (d.transitions) out.transitions = d.transitions;
      if (d.command_results) out.command_results = d.command_results;
      if (d.calls) out.calls = d.calls;
      if (d.lost.length) out.lost = joinSpans(d.lost);
      batch.dropped = out;
    }
    this.nextSeq++;
    const json = JSON.stringify(batch);
    const b = { seq: batch.seq, json, bytes: Buffer.byteLength(json) };
    this.inflight.push(b);
    this.inflightBytes += b.bytes;
    return b;
  }

  // acked forgets the batches at or below seq (an ack or a welcome's
  // last_seq); a welcome may also move the numbering past last_seq.
  acked (seq, fromWelcome) {
    while (this.inflight.length > 0 && this.inflight[0].seq <= seq) {
      this.inflightBytes -= this.inflight.shift().bytes;
    }
    if (fromWelcome && seq >= this.nextSeq) this.nextSeq = seq + 1;
  }

  // refused gives up the batch seq (an error naming it) and counts it.
  refused (seq) {
    const i = this.inflight.findIndex(b => b.seq === seq);
    if (i < 0) return false;
    this.inflightBytes -= this.inflight[i].bytes;
    this.inflight.splice(i, 1);
    this.dropped.batches++;
    this.totals.batches++;
    return true;
  }

  // _enforce merges, then drops, until everything fits in maxBytes.
  _enforce () {
    while (this.pendingBytes + this.inflightBytes > this.maxBytes) {
      if (this._mergeOne()) continue;
      if (this.windows.length > 0) {
        this._dropWindow();
      } else if (this.transitions.length > 0) {
        this.pendingBytes -= this.transitions.shift().bytes;
        this.dropped.transitions++;
        this.totals.transitions++;
      } else if (this.results.length > 0) {
        this.pendingBytes -= this.results.shift().bytes;
        this.dropped.command_results++;
        this.totals.command_results++;
      } else {
        return;
      }
    }
  }

  // _mergeOne merges the oldest window report into the next report of
  // its breaker when the two span at most an hour.
  _mergeOne () {
    const seen = new Map();
    for (let j = 0; j < this.windows.length; j++) {
      const b = this.windows[j].v;
      const i = seen.get(b.breaker);
      if (i !== undefined) {
        const a = this.windows[i].v;
        if (b.start + b.duration_ms - a.start <= LIMITS.maxWindowMs) {
          const m = mergeWindows(a, b);
          const bytes = size(m);
          this.pendingBytes += bytes - this.windows[i].bytes - this.windows[j].bytes;
          this.windows[j] = { v: m, bytes };
          this.windows.splice(i, 1);
          this.dropped.merged++;
          this.totals.merged++;
          return true;
        }
      }
      seen.set(b.breaker, j);
    }
    return false;
  }

  _dropWindow () {
    const { v, bytes } = this.windows.shift();
    this.pendingBytes -= bytes;
    const calls = callsOf(v.counts);
    const d = this.dropped;
    d.windows++;
    d.calls += calls;
    this.totals.windows++;
    this.totals.calls += calls;
    const end = v.start + v.duration_ms;
    for (let i = d.lost.length - 1; i >= 0; i--) {
      const s = d.lost[i];
      if (s.breaker === v.breaker) {
        if (s.end === v.start && end - s.start <= LIMITS.maxLostSpanMs) {
          s.end = end;
          s.calls += calls;
          return;
        }
        break;
      }
    }
    d.lost.push({ breaker: v.breaker, start: v.start, end, calls });
  }
}

// mergeWindows returns one report for a followed by b (same breaker).
function mergeWindows (a, b) {
  const m = { ...b, start: a.start, duration_ms: b.start + b.duration_ms - a.start, counts: {} };
  for (const k of COUNT_KEYS) m.counts[k] = (a.counts[k] || 0) + (b.counts[k] || 0);
  if (a.latency || b.latency) {
    m.latency = (b.latency || a.latency).map((n, i) => (a.latency ? a.latency[i] : 0) + (b.latency ? b.latency[i] : 0));
  }
  m.latency_sum_ms = (a.latency_sum_ms || 0) + (b.latency_sum_ms || 0);
  return m;
}

// joinSpans keeps at most MaxLostSpans spans, joining each breaker's
// spans into one when there are more.
function joinSpans (spans) {
  if (spans.length <= LIMITS.maxLostSpans) return spans;
  const by = new Map();
  for (const s of spans) {
    const j = by.get(s.breaker);
    if (!j) {
      by.set(s.breaker, { ...s });
    } else {
      j.start = Math.min(j.start, s.start);
      j.end = Math.min(Math.max(j.end, s.end), j.start + LIMITS.maxLostSpanMs);
      j.calls += s.calls;
    }
  }
  return [...by.values()].slice(0, LIMITS.maxLostSpans);
}

module.exports = { Outbox, mergeWindows };
