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
	"github.com/labstack/echo/v4"
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
	e := echo.New()
	col.Mount(e, collector.Auth{})
	srv := &http.Server{Addr: addr, Handler: e}
	go srv.ListenAndServe() //nolint:errcheck // closed below
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := col.Run(rctx); err != nil {
		t.Fatal(err)
	}
	srv.Close()
}
