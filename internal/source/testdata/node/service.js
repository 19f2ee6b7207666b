'use strict';
// A small Node service for cbdash's source tests: opossum breakers whose
// calls succeed or fail as the test asks, with opossum-hystrix's stream on
// /hystrix.stream and opossum-prometheus's metrics on /metrics. It listens
// on 127.0.0.1 on a free port and prints {"port": N} on its first line.
//
//   GET /call?breaker=NAME&outcome=ok|fail  fires the breaker once and
//       answers {"outcome": "success"|"failure"|"reject"|...}
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

const breakers = {};
for (const name of ['inventory', 'pricing']) {
  const b = new CircuitBreaker(async outcome => {
    if (outcome !== 'ok') throw new Error('scripted failure');
    return 'ok';
  }, { ...options, name });
  // opossum-prometheus counts only the events that have a listener when
  // a breaker is added: give halfOpen one.
  b.on('halfOpen', () => {});
  breakers[name] = b;
}

const registry = new client.Registry();
const prometheus = new PrometheusMetrics({ circuits: Object.values(breakers), registry });
const hystrix = new HystrixStats(Object.values(breakers));
const streams = new Set();
hystrix.getHystrixStream().on('data', chunk => {
  for (const res of streams) res.write(chunk);
});

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
