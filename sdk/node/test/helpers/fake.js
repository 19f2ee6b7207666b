'use strict';
// A scripted collector on loopback (a real websocket server speaking
// cbdash.v1 as the test says), and collectors that misbehave: one that
// accepts TCP connections and never answers (frozen), one that answers
// every upgrade with HTTP 401 (refusing).

const net = require('node:net');
const http = require('node:http');
const { WebSocketServer } = require('ws');

// fakeCollector calls onConn({ws, hello, send, messages}) for every
// connection after its hello; by default it welcomes with last_seq
// lastSeq() and acks every batch.
// GET /readyz answers 200 (503 when state.ready is false); port 0 is a
// free one.
function fakeCollector ({ lastSeq = () => 0, ack = true, onConn = () => {}, onMessage = () => {}, port = 0 } = {}) {
  const state = { conns: [], batches: [], hellos: [], ready: true, readyz: 0, closes: [] };
  const server = http.createServer((req, res) => {
    if (req.url === '/readyz') state.readyz++;
    res.writeHead(req.url === '/readyz' ? (state.ready ? 200 : 503) : 404).end();
  });
  const wss = new WebSocketServer({ server, handleProtocols: p => (p.has('cbdash.v1') ? 'cbdash.v1' : false) });
  state.wss = wss;
  wss.on('connection', ws => {
    const conn = { ws, hello: null, send: m => ws.send(JSON.stringify(m)), messages: [] };
    ws.on('error', () => {});
    ws.on('close', code => state.closes.push(code));
    ws.on('message', data => {
      const m = JSON.parse(data.toString());
      conn.messages.push(m);
      if (m.type === 'hello') {
        state.hellos.push(m);
        if (!conn.hello) {
          conn.hello = m;
          state.conns.push(conn);
          conn.send({ type: 'welcome', protocol: 1, last_seq: lastSeq(), server_time: Date.now() });
          onConn(conn);
        }
        return;
      }
      if (m.type === 'batch') {
        state.batches.push({ m, raw: data.toString(), conn });
        if (ack) conn.send({ type: 'ack', seq: m.seq });
      }
      onMessage(conn, m, data.toString());
    });
  });
  return new Promise(resolve => server.listen(port, '127.0.0.1', () => {
    state.url = `ws://127.0.0.1:${server.address().port}/api/v1/agent`;
    state.close = () => new Promise(r => {
      for (const c of wss.clients) c.terminate();
      wss.close();
      server.closeAllConnections?.();
      server.close(() => r());
    });
    resolve(state);
  }));
}

// frozen accepts connections and never reads or writes a byte.
function frozen () {
  const socks = new Set();
  const srv = net.createServer(s => { socks.add(s); s.on('error', () => {}); s.pause(); });
  return new Promise(resolve => srv.listen(0, '127.0.0.1', () => resolve({
    url: `ws://127.0.0.1:${srv.address().port}/api/v1/agent`,
    accepted: () => socks.size,
    close: () => new Promise(r => { for (const s of socks) s.destroy(); srv.close(() => r()); })
  })));
}

// refusing answers every request 401, as a collector does for a bad token.
function refusing () {
  let n = 0;
  const srv = http.createServer((req, res) => { n++; res.writeHead(401).end('bad or missing agent token'); });
  srv.on('upgrade', (req, sock) => { n++; sock.on('error', () => {}); sock.end('HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n'); });
  return new Promise(resolve => srv.listen(0, '127.0.0.1', () => resolve({
    url: `ws://127.0.0.1:${srv.address().port}/api/v1/agent`,
    requests: () => n,
    close: () => new Promise(r => { srv.closeAllConnections?.(); srv.close(() => r()); })
  })));
}

// closedPort returns a loopback URL where nothing listens.
function closedPort () {
  const srv = net.createServer();
  return new Promise(resolve => srv.listen(0, '127.0.0.1', () => {
    const url = `ws://127.0.0.1:${srv.address().port}/api/v1/agent`;
    srv.close(() => resolve({ url }));
  }));
}

module.exports = { fakeCollector, frozen, refusing, closedPort };
