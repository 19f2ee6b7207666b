// Package ingest is the agents' side of the collector: the ingest
// pipeline (pipeline.go) that takes a validated hello or batch to
// "stored, applied, acknowledged", and the transports that feed it, the
// agent websocket (GET /api/v1/agent: sessions, their flow control and
// hijacked sockets with shared read buffers) and HTTP ingest
// (POST /api/v1/ingest), and the sources in the server's own process
// (Pipeline.Ingest). It decodes and validates every message, bounds what
// agent tokens and services may declare (Limits), distrusts what an
// agent says of commands it was not sent (trust.go), tells a failing
// store from a bad batch (storehealth.go), applies batches to live state
// (internal/live) before their commit and acknowledges them only after
// it.
//
// It declares what it needs of others as interfaces of its own: the
// store (Store; *store.Store in production), and what it tells the
// holds, the commands and the other collectors of a fleet (Holds,
// Commands, Fleet), which internal/collector wires. Its handlers are
// plain net/http handlers that return the error to answer; internal/web
// mounts them.
package ingest
