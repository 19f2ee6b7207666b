package loadgen_test

import (
	"context"
	"net/http"
	_ "net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/collector"
	"github.com/cbdash/cbdash/internal/store"
)

// TestServeForLoad runs a bare collector (no dashboard) on
// $CBDASH_LOADGEN_SERVE for $CBDASH_LOADGEN_FOR (default 2m), with pprof
// on $CBDASH_LOADGEN_PPROF, writing its agent token to
// $CBDASH_LOADGEN_TOKEN_FILE: a target for profiling the collector under
// `cbdash loadgen`. Skipped unless CBDASH_LOADGEN_SERVE is set. It runs on
// the system clock, as its clients (other processes) do.
func TestServeForLoad(t *testing.T) {
	addr := os.Getenv("CBDASH_LOADGEN_SERVE")
	if addr == "" {
		t.Skip("CBDASH_LOADGEN_SERVE not set")
	}
	d, err := time.ParseDuration(os.Getenv("CBDASH_LOADGEN_FOR"))
	if err != nil {
		d = 2 * time.Minute
	}
	ctx := context.Background()
	dir := os.Getenv("CBDASH_LOADGEN_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	st, err := store.Open(ctx, filepath.Join(dir, "cbdash.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	col, err := collector.New(collector.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.CreateAgentToken(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if f := os.Getenv("CBDASH_LOADGEN_TOKEN_FILE"); f != "" {
		if err := os.WriteFile(f, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if p := os.Getenv("CBDASH_LOADGEN_PPROF"); p != "" {
		runtime.SetMutexProfileFraction(10)
		prof := &http.Server{Addr: p, Handler: http.DefaultServeMux}
		go prof.ListenAndServe() //nolint:errcheck // closed below
		defer prof.Close()
	}
	// The collector's own transports, as internal/web mounts them.
	mux := http.NewServeMux()
	for pattern, h := range map[string]func(http.ResponseWriter, *http.Request) error{
		"GET /api/v1/agent": col.ServeAgent, "POST /api/v1/ingest": col.ServeIngest,
		"GET /api/v1/events": col.ServeEvents, "GET /metrics": col.ServeMetrics,
	} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			}
		})
	}
	srv := &http.Server{Addr: addr, Handler: mux}
	go srv.ListenAndServe() //nolint:errcheck // closed below
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := col.Run(rctx); err != nil {
		t.Fatal(err)
	}
	srv.Close()
}
