'use strict';
// End to end against a real collector (`cbdash serve` built from this
// repository): an opossum service failing on a schedule, the collector
// killed with SIGKILL mid-run and started again on the same database and
// port, a hold from `cbdash trip` and its release. What cbdash stored must
// be exactly what opossum's own events said: every count once, every
// state change a transition. About 25 s; CBDASH_E2E_SECONDS=120 repeats
// the failing schedule for that long.

const test = require('node:test');
const assert = require('node:assert/strict');
const CircuitBreaker = require('opossum');
const { createAgent } = require('..');
const { Collector } = require('./helpers/collector');

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// waitFor polls cond every 5 ms until it is true or ms passed; it
// resolves to the time it took, or rejects.
async function waitFor (what, cond, ms) {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(5);
  }
  return Date.now() - t0;
}

const KEYS = ['successes', 'errors', 'timeouts', 'rejected', 'fallbacks'];

test('an opossum service reports every count and transition exactly once across a collector kill -9, and obeys a hold', { timeout: 120000 + (Number(process.env.CBDASH_E2E_SECONDS) || 0) * 1000 }, async t => {
  const col = await Collector.start();
  if (col.skip) {
    if (process.env.CI) assert.fail(`the end-to-end test cannot run in CI: ${col.skip}`);
    t.skip(col.skip);
    return;
  }
  t.after(() => col.stop());

  let mode = 'ok';
  const breaker = new CircuitBreaker(async () => {
    if (mode === 'fail') throw new Error('scripted failure');
    await sleep(mode === 'slow' ? 150 : 1);
    return 'ok';
  }, { name: 'inventory', timeout: 100, resetTimeout: 300, errorThresholdPercentage: 50, volumeThreshold: 5, rollingCountTimeout: 2000, rollingCountBuckets: 4 });
  breaker.fallback(() => 'fallback');

  const instance = `node-e2e-${process.pid}`;
  const agent = createAgent({ url: col.agentURL, token: col.agentToken, service: 'node-svc', instance, logger: { warn () {}, error () {}, debug () {} } });
  const src = agent.register(breaker);

  // opossum's own events, counted beside the agent.
  const seen = Object.fromEntries(KEYS.map(k => [k, 0]));
  const changes = []; // {from, to, at, down}: opossum's state changes outside holds
  let collectorDown = false;
  let state = 'closed';
  breaker.on('success', () => seen.successes++);
  breaker.on('failure', e => { if (e.code !== 'ETIMEDOUT') seen.errors++; });
  breaker.on('timeout', () => seen.timeouts++);
  breaker.on('reject', () => seen.rejected++);
  breaker.on('fallback', () => seen.fallbacks++);
  let heldRejects = 0;
  breaker.on('reject', () => { if (src.hold) heldRejects++; });
  for (const [ev, to] of [['open', 'open'], ['halfOpen', 'half_open'], ['close', 'closed']]) {
    breaker.on(ev, () => {
      if (src.hold || src.applying) return;
      changes.push({ from: state, to, at: Date.now(), down: collectorDown });
      state = to;
    });
  }

  // Load: a call every 4 ms, never awaited by the schedule.
  let calls = 0;
  const thrown = [];
  const load = setInterval(() => {
    calls++;
    breaker.fire().catch(e => thrown.push(e));
  }, 4);
  t.after(() => { clearInterval(load); breaker.shutdown(); return agent.close(0); });

  const seconds = Number(process.env.CBDASH_E2E_SECONDS) || 0;
  const phases = [['ok', 2000], ['fail', 1500], ['ok', 1500], ['slow', 1500], ['ok', 1500]];
  const runPhases = async () => { for (const [m, ms] of phases) { mode = m; await sleep(ms); } };
  await runPhases();

  // The collector dies mid-run (SIGKILL: nothing flushed) while the
  // service fails, and comes back on the same database and port.
  mode = 'fail';
  await col.kill9();
  collectorDown = true;
  await sleep(1500);
  mode = 'ok';
  await sleep(500);
  await col.serve();
  collectorDown = false;
  await waitFor('the agent reconnects', () => agent.connected, 15000);
  const until = Date.now() + seconds * 1000;
  do await runPhases(); while (Date.now() < until);
  mode = 'ok';
  await waitFor('the breaker closes', () => breaker.closed, 5000);

  // A hold from the command line: opossum rejects with its fallback
  // within a second, and the release closes it.
  const heldBefore = heldRejects;
  const tripped = col.cliAsync(['trip', 'node-svc/inventory', '--for', '30s', '--reason', 'node e2e drill']);
  // (timed from the start of the cbdash trip process)
  const tripMs = await waitFor('a held rejection with the fallback', () => heldRejects > heldBefore, 5000);
  await tripped;
  assert.ok(breaker.opened || breaker.halfOpen === false, 'opossum is open while held');
  await sleep(800); // past opossum's resetTimeout: the hold keeps it open
  assert.equal(src.hold && src.hold.state, 'forced_open');
  assert.equal(breaker.opened, true);
  const released = col.cliAsync(['release', 'node-svc/inventory', '--reason', 'node e2e drill over']);
  const releaseMs = await waitFor('the release closes opossum', () => !src.hold && breaker.closed, 5000);
  await released;
  await sleep(1000);
  clearInterval(load);
  await sleep(300); // the last calls end (their timeouts are 100 ms)

  assert.equal(await agent.close(15000), true, 'every batch acknowledged at close');
  assert.equal(thrown.filter(e => e.code !== 'ETIMEDOUT' && e.message !== 'scripted failure').length, 0, 'the service saw only its own errors');

  // The stored counts: the sum of the instance's history.
  const hist = await col.api(`/api/v1/breakers/node-svc/inventory/history?resolution=second`);
  const sum = {};
  for (const p of hist) for (const [k, v] of Object.entries(p.counts)) sum[k] = (sum[k] || 0) + v;
  const stored = {
    successes: sum.successes,
    errors: sum.errors,
    timeouts: sum.timeouts,
    rejected: sum.rejected_open + sum.rejected_half_open_full + sum.rejected_forced_open,
    fallbacks: sum.fallback_successes + sum.fallback_failures
  };
  t.diagnostic(`calls ${calls}; opossum events ${JSON.stringify(seen)}; stored ${JSON.stringify(stored)}; admitted ${sum.admitted}; held rejections ${sum.rejected_forced_open}`);
  assert.deepEqual(stored, seen, 'cbdash stored exactly opossum\'s event counts');
  assert.equal(sum.admitted, sum.successes + sum.failures);
  assert.ok(sum.rejected_forced_open > 0);
  assert.equal(agent.status().dropped.windows, 0);
  assert.ok(agent.status().welcomes >= 2, 'the agent reconnected after the kill');

  // Every opossum state change is a transition, once, in order.
  const ts = (await col.api(`/api/v1/transitions?service=node-svc&breaker=inventory&instance=${instance}`)).reverse();
  const lib = ts.filter(x => x.cause.kind !== 'command' && x.cause.kind !== 'expired');
  assert.deepEqual(lib.map(x => `${x.from}>${x.to}`), changes.map(x => `${x.from}>${x.to}`));
  assert.ok(changes.some(x => x.to === 'half_open'), 'half-open seen');
  const delays = [];
  lib.forEach((x, i) => {
    assert.ok(Math.abs(x.at - changes[i].at) <= 50, `transition ${i} stamped at opossum's time`);
    if (!changes[i].down) delays.push(Date.parse(x.received_at) - x.at);
  });
  delays.sort((a, b) => a - b);
  const cmd = ts.filter(x => x.cause.kind === 'command').map(x => `${x.from}>${x.to}`);
  assert.deepEqual(cmd, ['closed>forced_open', 'forced_open>closed']);
  t.diagnostic(`transitions ${lib.length} (+${cmd.length} by commands); delay collector received - opossum changed: median ${delays[delays.length >> 1]} ms, max ${delays[delays.length - 1]} ms; trip to held rejection ${tripMs} ms; release to closed ${releaseMs} ms; agent ${JSON.stringify(agent.status())}`);
  assert.ok(tripMs <= 1000, `held within 1 s of cbdash trip (took ${tripMs} ms)`);
  assert.ok(releaseMs <= 1000, `closed within 1 s of cbdash release (took ${releaseMs} ms)`);
  assert.ok(delays[delays.length - 1] <= 1000, 'every transition stored within a second while the collector was up');
});
