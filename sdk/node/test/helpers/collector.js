'use strict';
// A real cbdash collector for the end-to-end tests: `cbdash serve` built
// from this repository (go build ./cmd/cbdash, GOTOOLCHAIN go1.27.3 as the
// Makefile), or the binary CBDASH_BIN names, on 127.0.0.1 on a free port
// with its SQLite database in a temp dir. It can be killed with SIGKILL
// and started again on the same database and port.

const { spawn, execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const http = require('node:http');

const REPO = path.resolve(__dirname, '../../../..');

// binary returns the cbdash binary, building it once per test process;
// null (with a reason) when Go is missing.
let built = null;
function binary () {
  if (process.env.CBDASH_BIN) return { bin: process.env.CBDASH_BIN };
  if (built) return built;
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (go.error) {
    built = { why: 'go is not installed (or set CBDASH_BIN to a cbdash binary)' };
    return built;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cbdash-node-bin-'));
  const bin = path.join(dir, 'cbdash');
  execFileSync('go', ['build', '-o', bin, './cmd/cbdash'], {
    cwd: REPO, stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, GOTOOLCHAIN: process.env.GOTOOLCHAIN || 'go1.27.3' }
  });
  built = { bin };
  return built;
}

function freePort () {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function get (url, token) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: token ? { Authorization: `Bearer ${token}` } : {} }, res => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', d => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.setTimeout(5000, () => req.destroy(new Error('timeout')));
  });
}

class Collector {
  static async start () {
    const b = binary();
    if (!b.bin) return { skip: b.why };
    const c = new Collector(b.bin);
    c.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cbdash-node-e2e-'));
    c.db = path.join(c.dir, 'cbdash.db');
    c.port = await freePort();
    await c.serve();
    c.agentToken = c.cli(['token', 'create', '--service', 'node-svc', '--db', c.db]).trim();
    c.cli(['user', 'add', 'ops', '--role', 'operator', '--password', 'ops-password-1', '--db', c.db]);
    c.apiToken = c.cli(['token', 'create', '--user', 'ops', '--db', c.db]).trim();
    return c;
  }

  constructor (bin) {
    this.bin = bin;
    this.proc = null;
  }

  get base () { return `http://127.0.0.1:${this.port}`; }
  get agentURL () { return `ws://127.0.0.1:${this.port}/api/v1/agent`; }

  cli (args) {
    return execFileSync(this.bin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  }

  // cliAsync runs a command of the CLI against this server.
  cliAsync (args) {
    return new Promise((resolve, reject) => {
      const p = spawn(this.bin, [...args, '--server', this.base, '--token', this.apiToken], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', d => { out += d; });
      p.stderr.on('data', d => { out += d; });
      p.on('error', reject);
      p.on('close', code => (code === 0 ? resolve(out) : reject(new Error(`cbdash ${args.join(' ')}: exit ${code}: ${out}`))));
    });
  }

  // serve starts `cbdash serve` and resolves once /readyz answers 200.
  async serve () {
    const log = fs.openSync(path.join(this.dir, 'serve.log'), 'a');
    this.proc = spawn(this.bin, ['serve', '--addr', `127.0.0.1:${this.port}`, '--db', this.db], { stdio: ['ignore', log, log] });
    this.proc.on('error', () => {});
    const exited = new Promise(resolve => this.proc.once('exit', resolve));
    for (const deadline = Date.now() + 60000; Date.now() < deadline;) {
      const r = await Promise.race([get(`${this.base}/readyz`).catch(() => null), exited.then(() => 'exited')]);
      if (r === 'exited') throw new Error(`cbdash serve exited; see ${this.dir}/serve.log`);
      if (r && r.status === 200) return;
      await new Promise(resolve => setTimeout(resolve, 50));
    }
    throw new Error('cbdash serve was not ready within 60 s');
  }

  // kill9 kills the server with SIGKILL and resolves once it is gone.
  kill9 () {
    const p = this.proc;
    this.proc = null;
    if (!p || p.exitCode !== null) return Promise.resolve();
    return new Promise(resolve => {
      p.once('exit', resolve);
      p.kill('SIGKILL');
    });
  }

  async stop () {
    const p = this.proc;
    this.proc = null;
    if (!p || p.exitCode !== null) return;
    await new Promise(resolve => {
      p.once('exit', resolve);
      p.kill('SIGTERM');
      setTimeout(() => { try { p.kill('SIGKILL'); } catch {} }, 10000).unref();
    });
  }

  async api (p) {
    const r = await get(this.base + p, this.apiToken);
    if (r.status !== 200) throw new Error(`GET ${p}: ${r.status} ${r.body}`);
    return JSON.parse(r.body);
  }
}

module.exports = { Collector, freePort, REPO };
