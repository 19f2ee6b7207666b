'use strict';
// The wire constants of cbdash.v1 (docs/protocol.md; sdk/protocol/protocol.go
// is the reference). Every time is Unix milliseconds, every duration
// milliseconds, every rate a percent.

const SUBPROTOCOL = 'cbdash.v1';
const PROTOCOL = 1;

// LATENCY_BOUNDS_MS are the inclusive upper bounds of the latency
// histogram's buckets, the same as sdk/protocol.LatencyBoundsMillis; a
// 14th bucket counts the calls slower than 10000 ms.
const LATENCY_BOUNDS_MS = Object.freeze([1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000]);
const NUM_LATENCY_BUCKETS = LATENCY_BOUNDS_MS.length + 1;

const LIMITS = Object.freeze({
  maxMessageBytes: 1 << 20,
  maxTransitions: 10000,
  maxWindows: 10000,
  maxCommandResults: 1000,
  maxWindowMs: 3600000,
  maxLostSpans: 1000,
  maxLostSpanMs: 86400000,
  maxNameBytes: 200,
  maxTextBytes: 1000,
  maxSettings: 64,
  maxSeq: Number.MAX_SAFE_INTEGER
});

// COUNT_KEYS are the counters of a window report, in the protocol's order.
const COUNT_KEYS = Object.freeze([
  'admitted', 'successes', 'failures', 'errors', 'timeouts', 'panics', 'slow', 'ignored',
  'rejected_open', 'rejected_half_open_full', 'rejected_forced_open', 'rejected_bulkhead',
  'fallback_successes', 'fallback_failures'
]);

const ACTIONS = Object.freeze(['force_open', 'force_closed', 'release', 'reset']);

function zeroCounts () {
  const c = {};
  for (const k of COUNT_KEYS) c[k] = 0;
  return c;
}

// bucketOf returns the histogram bucket of a latency in ms.
function bucketOf (ms) {
  for (let i = 0; i < LATENCY_BOUNDS_MS.length; i++) {
    if (ms <= LATENCY_BOUNDS_MS[i]) return i;
  }
  return LATENCY_BOUNDS_MS.length;
}

// callsOf returns the calls (admitted and rejected) a window's counts hold.
function callsOf (c) {
  return c.admitted + c.rejected_open + c.rejected_half_open_full + c.rejected_forced_open + c.rejected_bulkhead;
}

// checkName throws unless s is a name the collector takes: a non-blank
// string of at most 200 bytes without control characters or leading or
// trailing spaces (the collector checks the rest: docs/protocol.md,
// Conventions).
function checkName (what, s) {
  if (typeof s !== 'string' || s.trim() === '') throw new TypeError(`${what} must be a non-blank string`);
  if (Buffer.byteLength(s) > LIMITS.maxNameBytes) throw new TypeError(`${what} is longer than ${LIMITS.maxNameBytes} bytes`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/.test(s)) throw new TypeError(`${what} contains a control character`);
  if (s !== s.trim()) throw new TypeError(`${what} starts or ends with a space`);
}

// text cuts s to at most 1000 bytes of UTF-8 (a text of the protocol).
function text (s) {
  s = String(s);
  if (Buffer.byteLength(s) <= LIMITS.maxTextBytes) return s;
  let out = Buffer.from(s).subarray(0, LIMITS.maxTextBytes).toString();
  while (Buffer.byteLength(out) > LIMITS.maxTextBytes || out.endsWith('\ufffd')) out = out.slice(0, -1);
  return out;
}

module.exports = {
  SUBPROTOCOL, PROTOCOL, LATENCY_BOUNDS_MS, NUM_LATENCY_BUCKETS, LIMITS, COUNT_KEYS, ACTIONS,
  zeroCounts, bucketOf, callsOf, checkName, text
};
