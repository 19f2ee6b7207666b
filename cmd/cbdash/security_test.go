package main

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/clocktest"
)

func TestServeDoesNotLogAGivenAdminPassword(t *testing.T) {
	t.Parallel()
	for _, given := range []string{"", "correct horse battery"} {
		t.Run("admin password given: "+map[bool]string{true: "yes", false: "no"}[given != ""], func(t *testing.T) {
			var o serveOptions
			o.Addr, o.DB = "127.0.0.1:0", filepath.Join(t.TempDir(), "cbdash.db")
			o.LogLevel, o.LogFormat, o.AdminPassword = "info", "text", given
			var logs logBuffer
			srv, err := openServer(context.Background(), o, slog.New(slog.NewTextHandler(&logs, nil)), clocktest.NewRunning())
			if err != nil {
				t.Fatal(err)
			}
			srv.ln.Close()
			srv.closeStore()
			out := logs.String()
			switch {
			case given != "" && (strings.Contains(out, given) || strings.Contains(out, "password=")):
				t.Errorf("the given admin password was logged:\n%s", out)
			case given == "" && !strings.Contains(out, "password="):
				t.Errorf("the generated admin password was not logged once:\n%s", out)
			}
		})
	}
}

func TestTrustedProxyFlagIsChecked(t *testing.T) {
	t.Parallel()
	o := serveOptions{Addr: "127.0.0.1:0", DB: "x.db", LogLevel: "info", LogFormat: "text", TrustedProxies: []string{"10.0.0.0/8", "192.0.2.7"}}
	got, err := o.trustedProxies()
	if err != nil || len(got) != 2 || got[1].String() != "192.0.2.7/32" {
		t.Fatalf("trustedProxies = %v, %v", got, err)
	}
	o.TrustedProxies = []string{"nonsense"}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--trusted-proxy") {
		t.Errorf("validate with a bad --trusted-proxy: %v", err)
	}
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "0.0.0.0:80": false, "192.0.2.1:80": false} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := loopbackOnly(a); got != want {
			t.Errorf("loopbackOnly(%s) = %v, want %v", addr, got, want)
		}
	}
}
