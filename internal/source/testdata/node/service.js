'use strict';
// A small Node service for cbdash's source tests: opossum breakers whose
// calls succeed or fail as the test asks, with opossum-hystrix's stream on
// /hystrix.stream (inventory and pricing) and opossum-prometheus's metrics
// on /metrics (catalog too). It listens
// on 127.0.0.1 on a free port and prints {"port": N} on its first line.
//
//   GET /call?breaker=NAME&outcome=ok|fail  fires the breaker once and
//       answers {"outcome": "success"|"failure"|"reject"|...}
//   GET /cycle?breaker=NAME&cycles=N&retrips=R&end=closed|open  gives the
//       breaker a history through opossum's own state machine: N cycles,
//       each opening on failed calls, going half-open after a 5 ms reset
//       timeout, failing R trial calls (each opens it again) and closing
//       on a successful one; end=open trips it once more, with the reset
//       timeout back to 60 s. Answers {"state": "closed"|"open"}.
//   GET /hold?breaker=NAME&n=N              fires the breaker N times with
//       calls that end (successfully) only at /release; answers once
//       opossum admitted or rejected them
//   GET /release                            ends the held calls; answers
//       once they ended
//   GET /hystrix.stream                     text/event-stream, a record
//       per breaker per bucket (1 s)
//   GET /metrics                            Prometheus text exposition
const http = require('http');
const CircuitBreaker = require('opossum');
const HystrixStats = require('opossum-hystrix');
const PrometheusMetrics = require('opossum-prometheus');
const client = require('prom-client');

const options = {
  timeout: 1000,
  errorThresholdPercentage: 50,
  volumeThreshold: 5,
  resetTimeout: 60000, // stays open for the test
  rollingCountTimeout: 10000,
  rollingCountBuckets: 10
};

// held are the calls of /hold waiting for /release.
let release;
let held = new Promise(resolve => { release = resolve; });

const breakers = {};
for (const name of ['inventory', 'pricing', 'catalog']) {
  const b = new CircuitBreaker(async outcome => {
    if (outcome === 'hold') await held;
    else if (outcome !== 'ok') throw new Error('scripted failure');
    return 'ok';
  }, { ...options, name, timeout: name === 'catalog' ? 600000 : options.timeout });
  // opossum-prometheus counts only the events that have a listener when
  // a breaker is added: give halfOpen one, except for catalog (opossum's
  // default: no halfOpen series).
  if (name !== 'catalog') b.on('halfOpen', () => {});
  breakers[name] = b;
}
const holding = [];

const registry = new client.Registry();
const prometheus = new PrometheusMetrics({ circuits: Object.values(breakers), registry });
const hystrix = new HystrixStats([breakers.inventory, breakers.pricing]); // catalog: metrics only
const streams = new Set();
hystrix.getHystrixStream().on('data', chunk => {
  for (const res of streams) res.write(chunk);
});

// failUntilOpen fires failing calls until the closed breaker opens.
async function failUntilOpen (b) {
  while (b.closed) await b.fire('fail').catch(() => {});
}

// cycle runs the cycles of /cycle.
async function cycle (b, cycles, retrips, end) {
  const reset = b.options.resetTimeout; // read by opossum at each open
  b.options.resetTimeout = 5;
  try {
    for (let i = 0; i < cycles; i++) {
      await failUntilOpen(b);
      for (let r = 0; r <= retrips; r++) {
        if (!b.halfOpen) await new Promise(resolve => b.once('halfOpen', resolve));
        await b.fire(r < retrips ? 'fail' : 'ok').catch(() => {});
      }
    }
  } finally {
    b.options.resetTimeout = reset;
  }
  if (end === 'open') await failUntilOpen(b);
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname === '/hystrix.stream') {
    res.writeHead(200, {
      'Content-Type': 'text/event-stream',
      'Cache-Control': 'no-cache',
      Connection: 'keep-alive'
    });
    res.write('retry: 10000\n');
    res.write('event: connecttime\n\n');
    streams.add(res);
    req.on('close', () => streams.delete(res));
    return;
  }
  if (url.pathname === '/metrics') {
    res.writeHead(200, { 'Content-Type': registry.contentType });
    res.end(await prometheus.metrics);
    return;
  }
  if (url.pathname === '/cycle') {
    const b = breakers[url.searchParams.get('breaker')];
    if (!b) {
      res.writeHead(404).end();
      return;
    }
    const n = name => parseInt(url.searchParams.get(name) || '0', 10);
    await cycle(b, n('cycles'), n('retrips'), url.searchParams.get('end'));
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ state: b.opened ? 'open' : b.halfOpen ? 'halfOpen' : 'closed' }));
    return;
  }
  if (url.pathname === '/hold') {
    const b = breakers[url.searchParams.get('breaker')];
    if (!b) {
      res.writeHead(404).end();
      return;
    }
    for (let i = 0; i < parseInt(url.searchParams.get('n') || '1', 10); i++) {
      holding.push(b.fire('hold').catch(() => {}));
    }
    res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
    return;
  }
  if (url.pathname === '/release') {
    release();
    await Promise.all(holding.splice(0));
    held = new Promise(resolve => { release = resolve; });
    res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
    return;
  }
  if (url.pathname === '/call') {
    const b = breakers[url.searchParams.get('breaker')];
    if (!b) {
      res.writeHead(404).end();
      return;
    }
    let outcome;
    try {
      await b.fire(url.searchParams.get('outcome'));
      outcome = 'success';
    } catch (e) {
      outcome = e.code === 'EOPENBREAKER' ? 'reject' : 'failure';
    }
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ outcome, opened: b.opened }));
    return;
  }
  res.writeHead(404).end();
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n');
});

process.on('SIGTERM', () => process.exit(0));
