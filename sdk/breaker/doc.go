// Package breaker is cbdash's circuit breaker: it guards each call to a
// dependency, stops calling a dependency that is failing, lets a few
// probes through to learn whether it has recovered, and reports
// everything it does (cumulative counters, a latency histogram, the
// sliding window beside its thresholds, and every transition with its
// cause) so that the rest of cbdash can see it. It uses only the standard
// library.
//
// # Using it
//
// Make one Breaker per dependency with New and run each call through
// Execute (or Do for a call that returns a value, the WithFallback
// variants for a fallback, or Allow and Call.Done for middleware). For
// net/http clients, NewTransport wraps an http.RoundTripper with one
// breaker per host (at most TransportConfig.MaxBreakers of them, idle ones
// evicted, counted in Transport.Stats). A Breaker is safe for concurrent use. A successful
// call through a closed breaker allocates nothing, and with a count window
// it takes no lock either (a time window takes a short lock per call).
//
// The clock. A call reads the monotonic clock when it starts and when it
// ends, for the latency histogram; each reading costs about 30 ns, most
// of a successful call's cost. While some breaker of the process is hot
// (one goroutine making 100,000 calls a second or more through it), a
// coarse clock runs: a reading kept by one ticker goroutine, shared by
// every breaker of the process, that ticks each millisecond and stops by
// itself 50 ms after the last hot breaker cools down. Meanwhile every
// breaker that uses the system clock, a count window, no slow-call
// detection, no CallTimeout and no bulkhead takes both readings of a
// successful closed call's Execute (or Do) from it, one atomic load each.
// Such a call is counted in the histogram at a whole number of
// milliseconds within one of its duration, so it may land in the next
// bucket or the one before when it took within a millisecond of a bound;
// a call in flight across a tick that the scheduler ran late (a process
// short of CPU: ticks may then come tens of milliseconds apart) is
// counted at up to the delay. LatencySum stays right on average. Nothing the
// breaker decides reads the coarse clock: failures, transitions, probes,
// ramps, timeouts, slow calls and time windows read the precise one, and
// while no breaker is hot every call reads only the precise one.
//
// # States
//
//   - closed: calls pass and their outcomes are recorded in a sliding
//     window. When the window holds at least MinimumCalls calls and the
//     failure rate or the slow-call rate reaches its threshold, the
//     breaker opens.
//   - open: every call is rejected with ErrOpen until OpenDuration has
//     passed; from that moment (inclusive) the breaker is half-open,
//     whether a call or a state query looks at it first (the change is
//     made lazily, with no timer goroutine, and reported with the moment
//     it became due).
//   - half-open: at most HalfOpenMaxCalls probes run at once (more are
//     rejected with ErrHalfOpenFull). One failed probe (an error, a
//     timeout, a panic, or a slow success when slow detection is on) opens
//     the breaker again, for the backed-off duration;
//     HalfOpenSuccessThreshold consecutive successful probes close it with
//     an empty window. Ignored and canceled probes free their slot and
//     decide nothing.
//   - forced open / forced closed: held by an operator command (Apply):
//     forced open rejects every call with ErrForcedOpen; forced closed
//     admits and records every call in a fresh window but never trips.
//     Automatic transitions are suspended until release, reset or the
//     command's TTL (resilience4j's FORCED_OPEN and METRICS_ONLY).
//
// Every transition starts a new generation. A call admitted in an earlier
// generation is still counted in the totals when it ends, but it changes
// nothing in the state machine: it is not recorded in the new window and
// it is not a probe (gobreaker's generations). So late results of calls
// that started before a trip can neither re-trip the breaker nor close it.
//
// # Settings
//
// Every Config field's zero value means its default, so Config{} works.
// New rejects an invalid Config with an error that names the field.
//
//   - Window (default: count window of 100 calls). Kind CountWindow keeps
//     the last Size recorded calls; Kind TimeWindow keeps the calls of the
//     last Duration, cut into Buckets buckets (default 10) that slide one
//     at a time: a call ending at t (time since the breaker was made) falls
//     in bucket t/(Duration/Buckets), and at time now the window holds the
//     current bucket and the Buckets-1 before it. Both are resilience4j's
//     slidingWindowType COUNT_BASED and TIME_BASED; the sliding (not
//     tumbling) time window is Hystrix's rolling window.
//   - FailureRateThreshold (percent, (0, 100], default 50): the breaker
//     opens when failures*100/calls >= this (resilience4j's
//     failureRateThreshold; the comparison is inclusive, so 100 can trip).
//   - SlowCallDuration (duration, default 0 = off) and
//     SlowCallRateThreshold (percent, (0, 100], default 100): a recorded
//     call that took at least SlowCallDuration is slow, successful or not,
//     and the breaker opens when slow*100/calls >= the threshold
//     (resilience4j's slowCallDurationThreshold and
//     slowCallRateThreshold).
//   - MinimumCalls (calls, default 10): no rate is judged before the
//     window holds this many recorded calls (resilience4j's
//     minimumNumberOfCalls, Hystrix's requestVolumeThreshold). A failed
//     probe reopens the breaker whatever this says.
//   - OpenDuration (duration, default 60s): how long the breaker stays
//     open before it lets probes through (resilience4j's
//     waitDurationInOpenState, Polly's BreakDuration, Hystrix's
//     sleepWindowInMilliseconds).
//   - OpenBackoff (default none): after each failed probe the next open
//     duration is the previous one times Multiplier, capped at Max, kept
//     exact; it returns to OpenDuration once the breaker closes
//     (resilience4j's IntervalFunction.ofExponentialBackoff, Polly's
//     BreakDurationGenerator). Jitter (fraction 0..1) spreads each open
//     duration uniformly within +/- Jitter of itself, so that a fleet does
//     not probe in lockstep; leave it 0 in tests.
//   - HalfOpenMaxCalls (calls, default 1): probes admitted at once while
//     half-open (resilience4j's permittedNumberOfCallsInHalfOpenState).
//   - HalfOpenSuccessThreshold (calls, default 1): consecutive successful
//     probes that close the breaker (failsafe's successThreshold).
//   - CallTimeout (duration, default 0 = none): a call still running this
//     long after it started ends as a Timeout failure at that moment; its
//     context is canceled with cause ErrTimeout and its late result is
//     thrown away (resilience4j's TimeLimiter, Hystrix's
//     execution.isolation.thread.timeoutInMilliseconds).
//   - RampDuration (duration, default 0 = off): ramped recovery. After
//     the breaker closes from half-open it admits a share of the calls
//     that rises linearly from 0 to 1 over RampDuration and rejects the
//     rest with ErrRamp (reason "ramp"; the fallback serves them), so that
//     a dependency that has just come back is not hit by the whole load
//     at once (Hystrix issue 1647, still open there; Envoy's slow start
//     does this for new endpoints, not for breakers). The admitted calls
//     are judged in the closed window as usual: reaching a threshold
//     (with MinimumCalls) opens the breaker again and abandons the ramp
//     (Cause.RampShare says how far it had got). Commands never ramp and
//     end a ramp. While ramping a call costs one extra atomic operation;
//     with RampDuration 0, or once the ramp is over, nothing.
//   - MaxConcurrent (calls, default 0 = unlimited): the bulkhead; calls in
//     flight at once, in any state, of any generation; more are rejected
//     with ErrBulkheadFull and are not failures (Hystrix's semaphore
//     isolation, resilience4j's Bulkhead). When the breaker would reject a
//     call too, its own reason is given, and a bulkhead rejection never
//     takes a probe slot.
//   - Classify (default DefaultClassify): maps a call's error to its
//     Outcome. The caller's own cancellation or deadline is never a
//     failure; the breaker's own timeout is; an error marked with
//     Ignorable (a 404, a validation error, a declined card) is not
//     recorded at all (resilience4j's ignoreExceptions, Polly's
//     ShouldHandle). A Classify that panics costs the call a Panic
//     outcome and the panic goes on to the caller; it never leaves a
//     probe or bulkhead slot taken (resilience4j's issue 2324).
//   - Clock (default the system's monotonic clock): breakertest.Clock is a
//     virtual clock for tests, which never sleep.
//   - Shadows (default none, at most MaxShadows = 3): shadow settings,
//     named configurations run beside the live one and never enforced;
//     see Shadow settings below.
//
// # Shadow settings
//
// A shadow is a "what if these were my settings" that runs on the live
// calls: the breaker's own state machine with other settings, told of
// every outcome the live breaker records, at the moment the call ends,
// and rejecting nothing. Its semantics are those of Envoy's outlier
// detection with enforcing_* at 0 (ejections computed and logged with
// enforced:false, never applied) and resilience4j's METRICS_ONLY state
// (counted, never rejecting), kept as a whole state machine: closed, it
// records the outcome in its own window (slow and timed out by its own
// SlowCallDuration and CallTimeout); open, it would have rejected the
// call, so it does not count the outcome; after its own open duration it
// is half-open and takes the next calls' outcomes as its probes. Its
// transitions carry Transition.Shadow and go to SubscribeShadows, never to
// Subscribe; the agent sends them to cbdash as shadow transitions, which
// the dashboard draws beside the live ones and the replay replays.
// ShadowSnapshot reads one. A shadow never changes a live decision, holds
// no lock while observers run, and a panic of its observers never reaches
// the call. Cost: with no shadows, one nil check per call; each shadow
// adds about 8 ns and no allocation to a successful closed call
// (BenchmarkShadows in bench/).
//
// # Observing
//
// Snapshot returns cumulative Totals (never reset), the latency histogram
// over LatencyBounds (fixed bounds, so histograms of many instances merge
// by adding counts), calls in flight, and the window as judged now beside
// its thresholds: the headroom left before the breaker opens. Reading
// state or a snapshot has no side effect beyond making a due open >
// half-open change or a forced state's expiry visible. Subscribe delivers
// each Transition, with its Cause (which rate tripped and the window at
// that moment, which probe failed and how, which command and why), to
// observers called outside any lock, in order.
//
// # Semantics
//
// The exact behaviour is fixed by the replay scenarios in
// testdata/scenarios (FORMAT.md there describes them), each reduced from
// a real bug in another circuit breaker library; TestScenarios replays
// every file of a folder (DIR absolute or relative to sdk/breaker) and
// prints PASS or FAIL per file (go test shows a passing package's output
// only with -v):
//
//	go test ./breaker -run TestScenarios -v -args -scenarios=DIR
package breaker
