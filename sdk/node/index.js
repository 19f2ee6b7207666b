'use strict';
// @cbdash/agent: report opossum circuit breakers (and hand-written ones)
// to a cbdash collector over its agent protocol (cbdash.v1,
// docs/protocol.md in the cbdash repository). See README.md and index.d.ts.

const { Agent } = require('./lib/agent');
const { OpossumSource } = require('./lib/opossum');
const { StatefulSource } = require('./lib/source');
const protocol = require('./lib/protocol');

// register reports an opossum CircuitBreaker: its events become counts,
// latencies and transitions, and operator holds act on it. It returns the
// source (unregister with agent.unregister(name)).
Agent.prototype.register = function register (breaker, opts = {}) {
  return this._registerSource(new OpossumSource(breaker, opts));
};

// registerBreaker reports a hand-written breaker that has a `state`
// ('closed', 'open', 'half-open', in any case) and an onTransition(fn)
// (or emits 'transition' (from, to)). Count its calls with
// source.call(fn). Holds are not supported for it.
Agent.prototype.registerBreaker = function registerBreaker (breaker, opts = {}) {
  return this._registerSource(new StatefulSource(breaker, opts));
};

// unregister sends the breaker's last report and stops reporting it.
Agent.prototype.unregister = function unregister (name) {
  return this._unregisterSource(name);
};

// createAgent returns a started agent.
function createAgent (opts) {
  return new Agent(opts).start();
}

module.exports = { Agent, createAgent, OpossumSource, StatefulSource, protocol };
