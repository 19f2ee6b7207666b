'use strict';
// The agent's protocol against a scripted collector on loopback: batches
// resent byte for byte until acknowledged, a welcome's last_seq, refused
// batches counted, commands applied at most once, failover, and the
// outbox's exact accounting under pressure.

const test = require('node:test');
const assert = require('node:assert/strict');
const CircuitBreaker = require('opossum');
const { Agent } = require('..');
const { fnv1a32 } = require('../lib/agent');
const { Outbox } = require('../lib/outbox');
const { callsOf, zeroCounts } = require('../lib/protocol');
const { fakeCollector, closedPort } = require('./helpers/fake');

const quiet = { warn () {}, error () {}, debug () {} };
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
async function until (what, cond, ms = 30000) {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(5);
  }
}

function agentFor (urls, extra = {}) {
  return new Agent({ urls: [].concat(urls), service: 'node-svc', instance: 'i-1', token: 't', logger: quiet, reportIntervalMs: 30, minBackoffMs: 10, maxBackoffMs: 100, ...extra });
}

function opossum (name = 'inventory', opts = {}) {
  const b = new CircuitBreaker(async x => { if (x === 'fail') throw new Error('boom'); return 'ok'; },
    { name, timeout: 1000, resetTimeout: 100, volumeThreshold: 3, errorThresholdPercentage: 50, ...opts });
  b.fallback(() => 'fb');
  return b;
}

test('unacknowledged batches are resent byte for byte and in order, after those the welcome says are stored', async t => {
  let lastSeq = 0;
  const fake = await fakeCollector({ ack: false, lastSeq: () => lastSeq });
  t.after(() => fake.close());
  const a = agentFor(fake.url).start();
  t.after(() => a.close(0));
  const b = opossum();
  a.register(b);
  for (const t0 = Date.now(); fake.batches.length < 3;) { // a busy machine may put several calls in one window
    if (Date.now() - t0 > 10000) throw new Error('three batches on the first connection: not within 10 s');
    await b.fire();
    await sleep(20);
  }
  const first = fake.batches.filter(x => x.conn === fake.conns[0]).map(x => x.raw);
  lastSeq = 1; // the collector stored batch 1 but its ack was lost
  fake.conns[0].ws.terminate();
  await until('a second connection', () => fake.conns.length >= 2);
  await until('the resend', () => fake.batches.filter(x => x.conn === fake.conns[1]).length >= first.length - 1);
  const again = fake.batches.filter(x => x.conn === fake.conns[1]).map(x => x.raw);
  assert.deepEqual(again.slice(0, first.length - 1), first.slice(1));
  assert.equal(fake.conns[1].hello.started_at, fake.conns[0].hello.started_at);
  assert.deepEqual(fake.conns[1].hello.breakers.map(x => x.name), ['inventory']);
});

test('a welcome whose last_seq is past what the agent sent moves its numbering on', async t => {
  const fake = await fakeCollector({ lastSeq: () => 41 });
  t.after(() => fake.close());
  const a = agentFor(fake.url).start();
  t.after(() => a.close(0));
  const b = opossum();
  a.register(b);
  await b.fire();
  await until('a batch', () => fake.batches.length >= 1);
  assert.equal(fake.batches[0].m.seq, 42);
});

test('a refused batch is given up and counted in dropped.batches of a later batch', async t => {
  let refused = false;
  const fake = await fakeCollector({
    ack: false,
    onMessage: (conn, m) => {
      if (m.type !== 'batch') return;
      if (!refused) {
        refused = true;
        conn.send({ type: 'error', seq: m.seq, reason: 'invalid message: test' });
      } else {
        conn.send({ type: 'ack', seq: m.seq });
      }
    }
  });
  t.after(() => fake.close());
  const a = agentFor(fake.url).start();
  t.after(() => a.close(0));
  const b = opossum();
  a.register(b);
  await b.fire();
  await until('a batch with dropped.batches', () => fake.batches.some(x => x.m.dropped && x.m.dropped.batches === 1));
  await until('every other batch acknowledged', () => a.status().unacked === 0);
  assert.equal(fake.batches.filter(x => x.m.dropped).length, 1, 'the refusal counted once');
});

test('a command is applied at most once per id and its result given again on redelivery', async t => {
  const cmd = { type: 'command', id: 'c-1', breaker: 'inventory', action: 'force_open', ttl_ms: 60000, issued_at: Date.now(), reason: 'drill', actor: 'ops' };
  const fake = await fakeCollector({
    onConn: conn => {
      conn.send(cmd);
      conn.send({ type: 'command', id: 'c-2', breaker: 'nope', action: 'reset' });
      conn.send({ type: 'command', id: 'c-3', breaker: 'inventory', action: 'explode' });
      conn.send({ type: 'command', id: 'c-4', breaker: 'inventory', action: 'force_open', expires_at: 1 });
      conn.send({ type: 'command', breaker: 'inventory', action: 'reset' }); // no id: ignored
    }
  });
  t.after(() => fake.close());
  const a = agentFor(fake.url).start();
  t.after(() => a.close(0));
  const b = opossum();
  a.register(b);
  const results = () => fake.batches.flatMap(x => x.m.command_results || []);
  await until('4 results', () => results().length >= 4);
  fake.conns[0].ws.terminate();
  await until('8 results', () => results().length >= 8);
  const byId = id => results().filter(r => r.id === id);
  assert.equal(byId('c-1').length, 2);
  assert.deepEqual(byId('c-1')[0], byId('c-1')[1]);
  assert.equal(byId('c-1')[0].ok, true);
  assert.equal(byId('c-1')[0].state, 'forced_open');
  assert.equal(byId('c-2')[0].error, 'unknown breaker nope');
  assert.equal(byId('c-3')[0].error, 'unknown action "explode"');
  assert.equal(byId('c-4')[0].error, 'command expired before delivery');
  const forced = fake.batches.flatMap(x => x.m.transitions || []).filter(x => x.to === 'forced_open');
  assert.equal(forced.length, 1, 'applied once');
  assert.equal(forced[0].cause.command_id, 'c-1');
  assert.equal(forced[0].cause.expires_at, forced[0].at + 60000);
  assert.equal(b.opened, true);
});

test('given several collector URLs the agent starts at the hashed one and moves on when one fails', async t => {
  const down = await closedPort();
  const fake = await fakeCollector();
  t.after(() => fake.close());
  for (const urls of [[down.url, fake.url], [fake.url, down.url]]) {
    const a = agentFor(urls);
    assert.equal(a.urlIndex, fnv1a32('node-svc', 'i-1') % 2);
    a.start();
    await until('connected', () => a.connected);
    assert.equal(a.conn.url, fake.url);
    await a.close(0);
  }
  // FNV-1a, 32 bits, as sdk/agent's firstURL (Go's hash/fnv New32a of
  // "node-svc\x00i-1" is 0x3171f05b).
  assert.equal(fnv1a32('node-svc', 'i-1'), 0x3171f05b);
});

test('opossum\'s events are counted as the protocol says: timeouts once, rejections by kind, fallbacks as they settle', async t => {
  const a = agentFor('ws://127.0.0.1:9/api/v1/agent'); // never started
  let open; // slow calls end only when the test ends: after their timeouts, however late the timers run
  const gate = new Promise(resolve => { open = resolve; });
  t.after(() => open());
  const b = new CircuitBreaker(async x => {
    if (x === 'slow') await gate;
    if (x === 'fail') throw new Error('boom');
    return 'ok';
  }, { name: 'inv', timeout: 40, resetTimeout: 60000, volumeThreshold: 100, capacity: 2 });
  b.fallback((x, err) => (x === 'fbfail' ? Promise.reject(new Error('no fallback')) : 'fb'));
  const src = a.register(b);
  await b.fire('ok');
  await b.fire('fail');
  await b.fire('slow'); // timeout: opossum emits timeout and failure
  // a semaphore rejection: two calls in flight, the third locked out
  const p1 = b.fire('slow'); const p2 = b.fire('slow'); const p3 = b.fire('ok');
  await Promise.all([p1, p2, p3]);
  b.open();
  await b.fire('x'); // rejected, fallback fb
  await b.fire('fbfail').catch(() => {}); // rejected, fallback fails
  await sleep(10);
  const c = src.snapshot().counts;
  assert.equal(c.successes, 1);
  assert.equal(c.errors, 1);
  assert.equal(c.timeouts, 3);
  assert.equal(c.failures, 4);
  assert.equal(c.admitted, 5);
  assert.equal(c.rejected_bulkhead, 1);
  assert.equal(c.rejected_open, 2);
  assert.equal(c.fallback_successes, 6); // the failure, 3 timeouts, the semaphore rejection, a rejection
  assert.equal(c.fallback_failures, 1);
  assert.equal(src.snapshot().latency.reduce((x, y) => x + y), 5);
  const cfg = src.describe();
  assert.equal(cfg.library, 'opossum 10.0.0');
  assert.equal(cfg.call_timeout_ms, 40);
  assert.equal(cfg.max_concurrent, 2);
  assert.deepEqual(Object.keys(cfg.settings).slice(0, 5), ['timeout', 'errorThresholdPercentage', 'resetTimeout', 'volumeThreshold', 'rollingCountTimeout']);
  b.shutdown();
});

test('the outbox merges, then drops, under pressure and accounts exactly for what it dropped', () => {
  let now = 1_000_000;
  const box = new Outbox(64 * 1024, () => now);
  let calls = 0;
  for (let i = 0; i < 2000; i++) {
    const counts = zeroCounts();
    counts.admitted = counts.successes = 1 + (i % 7);
    counts.rejected_open = i % 3;
    calls += callsOf(counts);
    box.addWindow({ breaker: `b${i % 3}`, start: now, duration_ms: 1000, state: 'closed', counts, in_flight: 0, latency_sum_ms: 0, headroom: {} });
    now += 1000 / 3 | 0;
  }
  assert.ok(box.pendingBytes <= 64 * 1024);
  assert.ok(box.totals.merged > 0);
  let kept = 0;
  for (const { v } of box.windows) kept += callsOf(v.counts);
  assert.equal(kept + box.totals.calls, calls, 'every call is in a kept report or in dropped.calls');
  for (const { v } of box.windows) assert.ok(v.duration_ms <= 3600000);
  // the batch carries the drops and its spans add up to dropped.calls
  const b = JSON.parse(box.take().json);
  if (box.totals.windows > 0) {
    assert.equal(b.dropped.calls, box.totals.calls);
    assert.equal(b.dropped.lost.reduce((s, x) => s + x.calls, 0), box.totals.calls);
  }
});

test('a breaker registered after the welcome is declared in a new hello before any batch reports it, and an unregistered one until its last report is acknowledged', async t => {
  const fake = await fakeCollector();
  t.after(() => fake.close());
  const a = agentFor(fake.url).start();
  t.after(() => a.close(0));
  a.register(opossum('inventory'));
  await until('connected', () => a.connected);
  const pricing = opossum('pricing');
  a.register(pricing);
  await pricing.fire();
  await until('a window of pricing', () => fake.batches.some(x => (x.m.windows || []).some(w => w.breaker === 'pricing')));
  const conn = fake.conns[0];
  const iHello = conn.messages.findIndex(m => m.type === 'hello' && m.breakers.some(b => b.name === 'pricing'));
  const iBatch = conn.messages.findIndex(m => m.type === 'batch' && (m.windows || []).some(w => w.breaker === 'pricing'));
  assert.ok(iHello > 0 && iHello < iBatch, 'declared before reported');
  a.unregister('pricing');
  await until('a hello without pricing', () => fake.hellos.length >= 3 && !fake.hellos[fake.hellos.length - 1].breakers.some(b => b.name === 'pricing'));
  const last = conn.messages.map((m, i) => [m, i]).filter(([m]) => m.type === 'batch' && (m.windows || []).some(w => w.breaker === 'pricing')).pop()[1];
  const dropped = conn.messages.findIndex(m => m.type === 'hello' && !m.breakers.some(b => b.name === 'pricing') && conn.messages.indexOf(m) > iHello);
  assert.ok(dropped > last, 'still declared while its last window was unacknowledged');
});

test('connected to another collector, the agent moves back to its preferred one once that /readyz has been ready for failbackAfterMs, losing and repeating nothing', async t => {
  const down = await closedPort(); // the preferred collector, not up yet
  const other = await fakeCollector();
  t.after(() => other.close());
  // FNV-1a of node-svc and i-1 is odd: of two URLs the second is preferred
  const a = agentFor([other.url, down.url], { failbackAfterMs: 300 }).start();
  t.after(() => a.close(0));
  assert.equal(a.preferred, 1);
  const b = opossum();
  a.register(b);
  await until('connected to the other', () => a.connected && a.conn.url === other.url);
  let calls = 0;
  const load = setInterval(() => { calls++; b.fire().catch(() => {}); }, 5);
  t.after(() => clearInterval(load));
  await sleep(200);
  const preferred = await fakeCollector({ port: Number(new URL(down.url).port) });
  t.after(() => preferred.close());
  await until('moved to the preferred collector', () => a.connected && a.conn.url === preferred.url);
  assert.ok(preferred.readyz >= 3, 'asked /readyz');
  assert.deepEqual(other.closes, [1000], 'closed normally');
  await sleep(200);
  clearInterval(load);
  await sleep(20);
  assert.equal(await a.close(5000), true);
  const bySeq = new Map();
  for (const x of [...other.batches, ...preferred.batches]) bySeq.set(x.m.seq, x.m);
  let admitted = 0;
  for (const m of bySeq.values()) for (const w of m.windows || []) admitted += w.counts.admitted;
  assert.equal(admitted, calls, 'every call counted once across the move');
});

test('an awaited close() resolves (false, after its timeout) even when nothing else keeps the process alive and no collector answers', () => {
  const { execFileSync } = require('node:child_process');
  const script = `
    const CircuitBreaker = require('opossum');
    const { createAgent } = require(${JSON.stringify(require.resolve('..'))});
    const a = createAgent({ url: 'ws://127.0.0.1:9/api/v1/agent', service: 's', logger: { warn () {}, error () {} } });
    const b = new CircuitBreaker(async () => 1, { name: 'x' });
    a.register(b);
    b.fire().then(() => a.close(300)).then(ok => console.log('closed ' + ok));`;
  const out = execFileSync(process.execPath, ['-e', script], { cwd: __dirname, encoding: 'utf8', timeout: 20000 });
  assert.equal(out.trim(), 'closed false');
});

test("the library reported is the service's opossum, not the one beside the agent", t => {
  // A service's own opossum (here 9.9.9, in a directory of its own), as
  // when the agent is installed as a link with its dev copy of opossum 10.
  const fs = require('fs');
  const os = require('os');
  const path = require('path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cbdash-opossum-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const pkg = path.join(dir, 'node_modules', 'opossum');
  fs.mkdirSync(path.join(pkg, 'lib'), { recursive: true });
  fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'opossum', version: '9.9.9', main: 'lib/index.js' }));
  fs.writeFileSync(path.join(pkg, 'lib', 'index.js'),
    `module.exports = class CircuitBreaker extends require(${JSON.stringify(require.resolve('opossum'))}) {};`);
  const Theirs = require(pkg);
  const a = new Agent({ url: 'ws://127.0.0.1:9/api/v1/agent', service: 'node-svc', instance: 'i-1', logger: quiet });
  const b = new Theirs(async () => 'ok', { name: 'theirs' });
  t.after(() => b.shutdown());
  assert.equal(a.register(b).describe().library, 'opossum 9.9.9');
  const ours = new CircuitBreaker(async () => 'ok', { name: 'ours' });
  t.after(() => ours.shutdown());
  assert.equal(a.register(ours).describe().library, 'opossum 10.0.0');
});
