'use strict';
// The agent's cost on an opossum call: the same run fires two opossum
// breakers alike, one registered with an agent connected to a real
// collector (`cbdash serve` built from this tree, or CBDASH_BIN), one
// without, in alternating rounds, and prints the time per call of each
// and their ratio.
//
//   node bench/bench.js                  (CBDASH_BIN=bin/cbdash to skip the build)
//   node bench/bench.js --down           the agent's collector is down
//   BENCH_CALLS=20000 BENCH_ROUNDS=4 node bench/bench.js   (shorter)

const CircuitBreaker = require('opossum');
const { Agent } = require('..');
const { Collector } = require('../test/helpers/collector');

const CALLS = Number(process.env.BENCH_CALLS) || 200000;
const ROUNDS = Number(process.env.BENCH_ROUNDS) || 10;

function breaker (name) {
  let n = 0;
  // a dependency that answers at once, failing one call in 50; opossum
  // without its call timer and percentiles (BENCH_OPOSSUM_DEFAULTS=1 keeps
  // them: opossum's own cost then hides the agent's in the noise)
  const lean = process.env.BENCH_OPOSSUM_DEFAULTS ? {} : { timeout: false, rollingPercentilesEnabled: false };
  const b = new CircuitBreaker(async () => { if (++n % 50 === 0) throw new Error('boom'); return n; },
    { name, timeout: 1000, resetTimeout: 1000, errorThresholdPercentage: 50, volumeThreshold: 20, ...lean });
  b.fallback(() => 0);
  return b;
}

// round fires b CALLS times, 100 calls at once then a turn of the event
// loop (as a service between requests: the agent's timers and socket
// run there, and their time counts), and returns the wall-clock and the CPU time (the process's user and
// system time: the agent's own work included) per call, ns.
async function round (b) {
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i += 100) {
    const ps = [];
    for (let j = 0; j < 100; j++) ps.push(b.fire());
    await Promise.all(ps);
    await new Promise(resolve => setImmediate(resolve));
  }
  const cpu = process.cpuUsage(cpu0);
  return { wall: Number(process.hrtime.bigint() - t0) / CALLS, cpu: (cpu.user + cpu.system) * 1000 / CALLS };
}

async function main () {
  const down = process.argv.includes('--down');
  let col = null;
  let url = 'ws://127.0.0.1:9/api/v1/agent';
  let token = '';
  if (!down) {
    col = await Collector.start();
    if (col.skip) throw new Error(col.skip);
    url = col.agentURL;
    token = col.agentToken;
  }
  const agent = new Agent({ url, token, service: 'node-svc', instance: `bench-${process.pid}`, logger: { warn () {}, error () {}, debug () {} } }).start();
  const withAgent = breaker('inventory');
  agent.register(withAgent);
  const without = breaker('bare');
  await round(without); await round(withAgent); // warm up
  const ns = { without: [], with: [] };
  for (let i = 0; i < ROUNDS; i++) { // alternating which goes first
    if (i % 2) ns.with.push(await round(withAgent));
    ns.without.push(await round(without));
    if (!(i % 2)) ns.with.push(await round(withAgent));
  }
  const med = (a, k) => a.map(x => x[k]).sort((x, y) => x - y)[a.length >> 1];
  const s = agent.status();
  await agent.close(5000);
  if (col) await col.stop();
  console.log(`opossum fire(), ${CALLS} calls x ${ROUNDS} rounds, node ${process.version}, collector ${down ? 'down' : 'up (cbdash serve)'}`);
  for (const k of ['cpu', 'wall']) {
    const a = med(ns.with, k);
    const b = med(ns.without, k);
    console.log(`  ${k === 'cpu' ? 'CPU time ' : 'wall time'} per call (median of rounds): ${b.toFixed(0)} ns without the agent, ${a.toFixed(0)} ns with; ratio ${(a / b).toFixed(3)}, agent cost ${(a - b).toFixed(0)} ns`);
  }
  console.log(`  agent: ${s.acks} acks, ${s.unacked} unacknowledged at the end, longest task ${s.longestTaskMs.toFixed(1)} ms`);
}

main().catch(e => { console.error(e); process.exitCode = 1; });
