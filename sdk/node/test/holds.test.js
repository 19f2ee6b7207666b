'use strict';
// Holds on opossum through its own open(), close(), disable() and
// enable(), with the TTL run by the agent (no collector here: the agent is
// never started, commands are handed to it as the collector would).

const test = require('node:test');
const assert = require('node:assert/strict');
const CircuitBreaker = require('opossum');
const { Agent } = require('..');

const quiet = { warn () {}, error () {}, debug () {} };
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
async function until (what, cond, ms = 30000) {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(5);
  }
}

function setup (opts = {}) {
  const a = new Agent({ url: 'ws://127.0.0.1:9/api/v1/agent', service: 'node-svc', instance: 'i-1', logger: quiet });
  let ran = 0;
  const b = new CircuitBreaker(async x => { ran++; if (x === 'fail') throw new Error('boom'); return 'ok'; },
    { name: 'inventory', timeout: 1000, resetTimeout: 50, volumeThreshold: 3, errorThresholdPercentage: 50 });
  b.fallback(() => 'fb');
  const src = a.register(b, opts);
  const transitions = () => a.outbox.transitions.map(x => x.v);
  const results = () => a.outbox.results.map(x => x.v);
  let n = 0;
  const cmd = (action, extra = {}) => a._command({ type: 'command', id: `c${++n}`, breaker: 'inventory', action, issued_at: Date.now(), ...extra });
  return { a, b, src, transitions, results, cmd, ran: () => ran };
}

test('force_open holds opossum open past its resetTimeout (no probe admitted), its fallback answers, and the TTL closes it without a collector', async () => {
  const { b, src, transitions, results, cmd, ran } = setup();
  cmd('force_open', { ttl_ms: 3000, reason: 'drill', actor: 'ops' });
  assert.equal(results()[0].ok, true);
  assert.equal(results()[0].state, 'forced_open');
  assert.equal(b.opened, true);
  const before = ran();
  const t0 = Date.now();
  // at least ten calls over at least 250 ms (however slow a busy machine
  // makes the loop): resetTimeout is 50 ms, so opossum would have probed
  for (let i = 0; i < 10 || Date.now() - t0 < 250; i++) {
    assert.equal(await b.fire('ok'), 'fb');
    await sleep(10);
  }
  assert.equal(ran(), before, 'no call reached the action while held open');
  assert.ok(src.snapshot().counts.rejected_forced_open > 5);
  assert.equal(src.snapshot().state, 'forced_open');
  assert.ok(src.snapshot().forcedUntil > Date.now());
  await until('the TTL ends the hold', () => b.closed && !src.hold, 30000);
  assert.equal(await b.fire('ok'), 'ok');
  const ts = transitions().map(t => `${t.from}>${t.to}:${t.cause.kind}`);
  assert.deepEqual(ts, ['closed>forced_open:command', 'forced_open>closed:expired']);
  assert.equal(transitions()[1].cause.command_id, 'c1');
});

test('force_closed lets every call through without tripping, counts them, and release gives opossum back its judgement', async () => {
  const { b, src, transitions, results, cmd } = setup();
  const action = b.action;
  cmd('force_closed');
  assert.equal(results()[0].state, 'forced_closed');
  assert.equal(b.enabled, false);
  for (let i = 0; i < 20; i++) await b.fire('fail').catch(() => {});
  assert.equal(b.closed, true, 'never trips while held closed');
  const c = src.snapshot().counts;
  assert.equal(c.admitted, 20);
  assert.equal(c.errors, 20);
  assert.equal(src.snapshot().state, 'forced_closed');
  cmd('release');
  assert.equal(results()[1].state, 'closed');
  assert.equal(b.enabled, true);
  assert.equal(b.action, action);
  for (let i = 0; i < 5; i++) await b.fire('fail').catch(() => {});
  assert.equal(b.opened, true, 'opossum judges again after release');
  assert.deepEqual(transitions().map(t => `${t.from}>${t.to}:${t.cause.kind}`),
    ['closed>forced_closed:command', 'forced_closed>closed:command', 'closed>open:failure_rate']);
  assert.equal(transitions()[2].cause.threshold, 50);
  assert.equal(transitions()[2].open_ms, 50);
});

test('reset closes an open opossum breaker; opossum\'s own changes are transitions with their causes, half-open included', async () => {
  const { b, transitions, cmd } = setup();
  for (let i = 0; i < 3; i++) await b.fire('fail').catch(() => {});
  assert.equal(b.opened, true);
  await until('half-open', () => b.halfOpen);
  await b.fire('fail').catch(() => {});
  await until('half-open again', () => b.halfOpen);
  await b.fire('ok');
  for (let i = 0; i < 3; i++) await b.fire('fail').catch(() => {});
  cmd('reset');
  assert.equal(b.closed, true);
  assert.deepEqual(transitions().map(t => `${t.from}>${t.to}:${t.cause.kind}`), [
    'closed>open:failure_rate', 'open>half_open:open_elapsed', 'half_open>open:probe_failed',
    'open>half_open:open_elapsed', 'half_open>closed:probes_succeeded', 'closed>open:failure_rate', 'open>closed:command']);
  const gens = transitions().map(t => t.generation);
  assert.deepEqual(gens, [1, 2, 3, 4, 5, 6, 7]);
});

test('a breaker registered with holds: false is declared holds_unsupported and its commands are refused with the reason', () => {
  const { b, src, results, cmd } = setup({ holds: false });
  assert.equal(src.describe().holds_unsupported, true);
  cmd('force_open');
  assert.equal(results()[0].ok, false);
  assert.match(results()[0].error, /holds are turned off/);
  assert.equal(b.closed, true);
});

test('a hand-written breaker with state and onTransition is reported: its transitions pushed, its calls counted, holds refused', async () => {
  const a = new Agent({ url: 'ws://127.0.0.1:9/api/v1/agent', service: 'node-svc', instance: 'i-1', logger: quiet });
  // the shape of the articles' TypeScript breaker
  const listeners = [];
  const mine = {
    name: 'payments',
    state: 'CLOSED',
    onTransition (fn) { listeners.push(fn); return () => listeners.splice(listeners.indexOf(fn), 1); },
    set (to) { const from = this.state; this.state = to; for (const fn of listeners) fn(from, to); }
  };
  const src = a.registerBreaker(mine, { openMs: 5000 });
  assert.equal(await src.call(async () => 'ok'), 'ok');
  await assert.rejects(src.call(async () => { throw new Error('boom'); }));
  mine.set('OPEN');
  mine.set('HALF_OPEN');
  mine.set('CLOSED');
  assert.deepEqual(a.outbox.transitions.map(x => `${x.v.from}>${x.v.to}:${x.v.cause.kind}`),
    ['closed>open:library_rule', 'open>half_open:open_elapsed', 'half_open>closed:probes_succeeded']);
  assert.equal(a.outbox.transitions[0].v.open_ms, 5000);
  const s = src.snapshot();
  assert.equal(s.counts.admitted, 2);
  assert.equal(s.counts.successes, 1);
  assert.equal(s.counts.errors, 1);
  assert.equal(src.describe().holds_unsupported, true);
  a._command({ type: 'command', id: 'h1', breaker: 'payments', action: 'force_open' });
  assert.match(a.outbox.results[0].v.error, /hand-written breaker cannot be held/);
  a.unregister('payments');
  assert.equal(listeners.length, 0);
});

test("a hand-written breaker's refusals while open are rejections, not failures; isRejection decides when given; odd shapes are said once", async () => {
  const warned = [];
  const log = { warn (m) { warned.push(m); }, error () {}, debug () {} };
  const a = new Agent({ url: 'ws://127.0.0.1:9/api/v1/agent', service: 'node-svc', instance: 'i-1', logger: log });
  const mine = { name: 'payments', state: 'OPEN', onTransition () {} };
  const src = a.registerBreaker(mine);
  // open: the breaker refuses without calling (as the README's exec does)
  await assert.rejects(src.call(async () => { throw new Error('circuit open'); }));
  mine.state = 'CLOSED';
  await assert.rejects(src.call(async () => { throw new Error('boom'); }));
  let c = src.snapshot().counts;
  assert.equal(c.rejected_open, 1);
  assert.equal(c.admitted, 1);
  assert.equal(c.errors, 1);
  // isRejection tells them apart whatever the state
  const other = { name: 'pricing', state: 'closed', on () {} };
  const src2 = a.registerBreaker(other, { isRejection: e => e.message === 'circuit open' });
  assert.throws(() => src2.call(() => { throw new Error('circuit open'); }));
  c = src2.snapshot().counts;
  assert.equal(c.rejected_open, 1);
  assert.equal(c.admitted, 0);
  // no way to hear transitions, an unknown state name: said once each
  const bare = { name: 'bare', state: 'TRIPPED' };
  a.registerBreaker(bare);
  a.registerBreaker({ name: 'bare2', state: 'closed', onTransition (fn) { this.fn = fn; } }).breaker.fn('closed', 'TRIPPED');
  assert.ok(warned.some(m => /bare: has neither onTransition/.test(m)), warned.join('\n'));
  assert.ok(warned.some(m => /bare2: unknown state "TRIPPED"/.test(m)), warned.join('\n'));
});
