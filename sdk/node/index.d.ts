// Types of @cbdash/agent: the cbdash agent for Node services (cbdash.v1,
// docs/protocol.md in the cbdash repository). Times are Unix milliseconds,
// durations milliseconds, rates percent.

/** A state of a breaker on the wire. */
export type State = 'closed' | 'open' | 'half_open' | 'forced_open' | 'forced_closed';

export interface Logger {
  warn(msg: string): void;
  error(msg: string): void;
  debug?(msg: string): void;
}

export interface AgentOptions {
  /** The collector's agent URL, ws:// or wss://, e.g. ws://cbdash:8080/api/v1/agent. */
  url?: string;
  /** Several collectors over one database: the agent starts at one picked by FNV-1a of service and instance and moves to the next on each failure. */
  urls?: string[];
  /** The agent token (`cbdash token create --service NAME`), sent as Authorization: Bearer. */
  token?: string;
  /** The service this process is an instance of (a name, no "/"). */
  service: string;
  /** This process among the service's instances; default `<hostname>-<pid>`. */
  instance?: string;
  /** At most 32 labels, e.g. { region: 'eu-west-1', version: '1.4.2' }. */
  labels?: Record<string, string>;
  /** How often breakers with activity report a window, ms (default 1000). */
  reportIntervalMs?: number;
  /** How often idle breakers report, ms (default 10000). */
  idleReportMs?: number;
  /** Bound of everything held for the collector, bytes (default 4 MiB; unacknowledged batches at most half). */
  maxBufferBytes?: number;
  /** Time allowed for the websocket handshake and for the welcome, ms (default 10000). */
  handshakeTimeoutMs?: number;
  /** A write that has not completed after this long ends the connection, ms (default 10000). */
  writeTimeoutMs?: number;
  /** No ack for this long while batches wait for one ends the connection, ms (default 30000). */
  ackTimeoutMs?: number;
  /** Reconnect backoff: from minBackoffMs doubling to maxBackoffMs, jittered in [d/2, d] (defaults 250 and 30000). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Connected to another of urls, move back to the preferred one after its /readyz answered 200 three times in a row over this long, ms (default 30000; 0 = never). */
  failbackAfterMs?: number;
  /** false: the agent's socket keeps the process alive (default: it never does). */
  unref?: boolean;
  /** Where the agent says what went wrong (default console.warn / console.error). */
  logger?: Logger;
  /** Extra options for ws's WebSocket (TLS: ca, cert...). */
  wsOptions?: Record<string, unknown>;
}

export interface RegisterOptions {
  /** The name on the dashboard (default the opossum breaker's name). */
  name?: string;
  /** The library declared in the hello (default `opossum <version>`). */
  library?: string;
  /** false: declare holds_unsupported and refuse operator commands for this breaker. */
  holds?: boolean;
}

export interface HandWrittenBreaker {
  /** 'closed' | 'open' | 'half-open' (any case, - or _ or camelCase). */
  readonly state: string;
  /** Calls fn(from, to) on each change; may return an unsubscribe function. */
  onTransition?(fn: (from: string, to: string) => void): (() => void) | void;
  /** Or an EventEmitter emitting 'transition' (from, to). */
  on?(event: 'transition', fn: (from: string, to: string) => void): unknown;
  off?(event: 'transition', fn: (from: string, to: string) => void): unknown;
  name?: string;
}

export interface RegisterBreakerOptions {
  name?: string;
  /** How long the breaker stays open, ms, for the dashboard. */
  openMs?: number;
  library?: string;
  /**
   * Tells a rejection by the breaker (counted as rejected, not as a
   * failure) from a failure of the call, for `call`. Without it, a call
   * that fails while the breaker was open as it began is a rejection.
   */
  isRejection?: (err: unknown) => boolean;
}

export interface Counts {
  admitted: number; successes: number; failures: number; errors: number; timeouts: number; panics: number;
  slow: number; ignored: number; rejected_open: number; rejected_half_open_full: number;
  rejected_forced_open: number; rejected_bulkhead: number; fallback_successes: number; fallback_failures: number;
}

export interface Snapshot {
  state: State;
  /** Cumulative counts since registration. */
  counts: Counts;
  /** Cumulative latency histogram on cbdash's 14 buckets (protocol.LATENCY_BOUNDS_MS). */
  latency: number[];
  latencySum: number;
  inFlight: number;
  forcedUntil?: number;
}

export interface Source {
  readonly name: string;
  snapshot(now?: number): Snapshot;
}

/** What the agent needs of an opossum CircuitBreaker (opossum's own types need not be installed). */
export interface OpossumLike {
  readonly name: string;
  on(event: string, fn: (...args: any[]) => void): unknown;
  prependListener(event: string, fn: (...args: any[]) => void): unknown;
  removeListener(event: string, fn: (...args: any[]) => void): unknown;
  fire(...args: any[]): Promise<unknown>;
  open(): void;
  close(): void;
  disable(): void;
  enable(): void;
}

export interface OpossumSource extends Source {}

export interface StatefulSource extends Source {
  /** Runs fn as one counted call of the breaker (sync or async) and returns what it returns. */
  call<T>(fn: () => T): T;
}

export interface AgentStatus {
  connected: boolean;
  url: string | null;
  nextSeq: number;
  unacked: number;
  pendingBytes: number;
  inflightBytes: number;
  /** What the agent gave up since it started (sent to the collector in dropped). */
  dropped: { windows: number; merged: number; batches: number; transitions: number; command_results: number; calls: number };
  connects: number; welcomes: number; acks: number; refusedBatches: number; commands: number;
  /** Exceptions the agent caught in its own callbacks. */
  errors: number;
  /** The longest the agent ever held the event loop in one task, ms. */
  longestTaskMs: number;
}

export class Agent {
  constructor(opts: AgentOptions);
  /** Connects and starts reporting; returns this. */
  start(): this;
  /** Reports an opossum CircuitBreaker (its events, its settings) and applies holds to it. */
  register(breaker: OpossumLike, opts?: RegisterOptions): OpossumSource;
  /** Reports a hand-written breaker; holds are not supported for it. */
  registerBreaker(breaker: HandWrittenBreaker, opts?: RegisterBreakerOptions): StatefulSource;
  /** Sends the breaker's last window and stops reporting it. */
  unregister(name: string): boolean;
  /** Sends the last windows, waits up to timeoutMs (2000) for every ack, closes. Never rejects; true when nothing was left unacknowledged. */
  close(timeoutMs?: number): Promise<boolean>;
  readonly connected: boolean;
  status(): AgentStatus;
}

/** A started agent. */
export function createAgent(opts: AgentOptions): Agent;

export const protocol: {
  SUBPROTOCOL: 'cbdash.v1';
  PROTOCOL: 1;
  LATENCY_BOUNDS_MS: readonly number[];
  NUM_LATENCY_BUCKETS: number;
};
