package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
)

// TestASecondServerOnOneSQLiteFileIsRefused: while a server runs on a
// SQLite file, a second one (another demo with another ADDR, say) is
// refused with who holds it and what to do, before it writes anything;
// once the first stops, the next start takes the file.
func TestASecondServerOnOneSQLiteFileIsRefused(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "cbdash-demo.db")
	o := serveOptions{Addr: "127.0.0.1:0", DB: db, LogLevel: "error", LogFormat: "text"}
	open := func() (*server, error) {
		return openServer(context.Background(), o, slog.New(slog.DiscardHandler), clocktest.NewRunning())
	}
	first, err := open()
	if err != nil {
		t.Fatal(err)
	}
	_, err = open()
	if !errors.Is(err, errDBInUse) {
		t.Fatalf("a second server on %s: %v, want refused as in use", db, err)
	}
	for _, want := range []string{db, "pid " + strconv.Itoa(os.Getpid()), "listening on 127.0.0.1:0", "--db", "DEMO_DB="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	first.ln.Close()
	if err := first.closeStore(); err != nil {
		t.Fatal(err)
	}
	next, err := open()
	if err != nil {
		t.Fatalf("a start after the first server stopped: %v", err)
	}
	next.ln.Close()
	next.closeStore()
}
