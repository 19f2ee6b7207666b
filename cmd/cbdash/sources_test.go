package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
)

// TestServeReadsSourcesFromFlagsAndFile serves with a --prometheus flag
// and a --sources file, each naming a resilience4j metrics endpoint (the
// recorded exposition of internal/source's tests), and finds both
// services' breakers on the dashboard.
func TestServeReadsSourcesFromFlagsAndFile(t *testing.T) {
	t.Parallel()
	exposition, err := os.ReadFile("../../internal/source/testdata/resilience4j-1.prom")
	if err != nil {
		t.Fatal(err)
	}
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer scrape" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write(exposition)
	}))
	defer metrics.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "sources.json")
	body := `{"targets": [{"kind": "prometheus", "url": "` + metrics.URL + `/actuator/prometheus", "service": "billing", "instance": "billing-1",
		"interval": "1s", "header": {"Authorization": "Bearer scrape"}}]}`
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var o serveOptions
	o.Addr, o.DB = "127.0.0.1:0", filepath.Join(dir, "cbdash.db")
	o.LogLevel, o.LogFormat = "error", "text"
	o.Prometheus = []string{metrics.URL + "/actuator/prometheus,service=catalog,instance=catalog-1,interval=1s,header=Authorization: Bearer scrape"}
	o.SourcesFile = file
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := openServer(ctx, o, slog.New(slog.DiscardHandler), clocktest.NewRunning())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx, nil) }()
	for _, svc := range []string{"catalog", "billing"} {
		eventually.True(t, svc+"/backendA on the dashboard, closed", func() bool {
			d, err := srv.col.Dependency(cbdash.DependencyKey{Service: svc, Breaker: "backendA"})
			return err == nil && d.State == "closed" && d.Headroom.FailureRate == 20
		})
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestServeRefusesBadSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"targets": [{"kind": "hystrix", "url": "http://a/hystrix.stream", "servce": "x"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  func(*serveOptions)
		want string
	}{
		{"a stream without a service", func(o *serveOptions) { o.Hystrix = []string{"http://a:8080/hystrix.stream"} }, "service is required"},
		{"an unknown option", func(o *serveOptions) { o.Prometheus = []string{"http://a/metrics,service=a,every=5s"} }, `unknown option "every"`},
		{"not a URL", func(o *serveOptions) { o.Hystrix = []string{"a:8080,service=a"} }, "is not an http(s) URL"},
		{"a misspelt field in the file", func(o *serveOptions) { o.SourcesFile = bad }, `unknown field "servce"`},
		{"a missing file", func(o *serveOptions) { o.SourcesFile = filepath.Join(dir, "none.json") }, "--sources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := serveOptions{Addr: "127.0.0.1:0", DB: "x.db", LogLevel: "info", LogFormat: "text"}
			tc.set(&o)
			err := o.validate()
			var u usageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validate: %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

// TestREADMESourcesSnippetsParse keeps the README's copy-paste snippets
// for the sources true: its --hystrix and --prometheus flags and its
// sources file are accepted as written.
func TestREADMESourcesSnippetsParse(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	var o serveOptions
	for _, flag := range []string{"--hystrix", "--prometheus"} {
		_, rest, ok := strings.Cut(text, "  "+flag+" '")
		if !ok {
			t.Fatalf("README has no %s snippet", flag)
		}
		spec, _, _ := strings.Cut(rest, "'")
		if flag == "--hystrix" {
			o.Hystrix = append(o.Hystrix, spec)
		} else {
			o.Prometheus = append(o.Prometheus, spec)
		}
	}
	_, rest, ok := strings.Cut(text, "```json\n{\"targets\"")
	if !ok {
		t.Fatal("README has no sources file snippet")
	}
	body, _, _ := strings.Cut(rest, "```")
	file := filepath.Join(t.TempDir(), "sources.json")
	if err := os.WriteFile(file, []byte(`{"targets"`+body), 0o600); err != nil {
		t.Fatal(err)
	}
	o.SourcesFile = file
	if err := o.parseTargets(); err != nil {
		t.Fatal(err)
	}
	if len(o.targets) != 4 {
		t.Errorf("README snippets give %d targets, want 4: %+v", len(o.targets), o.targets)
	}
}
