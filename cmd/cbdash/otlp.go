package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/cbdash/cbdash/internal/otelexport"
)

// otlpOptions are the flags of the OpenTelemetry metrics export.
type otlpOptions struct {
	Endpoint string        // --otlp-endpoint: OTLP/HTTP receiver; "" = no export
	Interval time.Duration // --otlp-interval
	Headers  []string      // --otlp-header: "Name=value", repeatable
	headers  map[string]string
}

func (o *otlpOptions) bind(fs *pflag.FlagSet) {
	fs.StringVar(&o.Endpoint, "otlp-endpoint", "", "export the /metrics figures over OTLP/HTTP to this receiver, e.g. http://otel-collector:4318 (/v1/metrics is appended to a URL without a path; default: no export)")
	fs.DurationVar(&o.Interval, "otlp-interval", 15*time.Second, "time between OTLP exports")
	fs.StringArrayVar(&o.Headers, "otlp-header", nil, "a header sent with every OTLP export, as Name=value (repeatable), e.g. an API key of the back end")
}

// validate checks the flags, naming the bad one, and parses the headers.
func (o *otlpOptions) validate() error {
	o.headers = nil
	if o.Endpoint == "" {
		if len(o.Headers) > 0 {
			return usageError{fmt.Errorf("--otlp-header needs --otlp-endpoint")}
		}
		return nil
	}
	if u, err := url.Parse(o.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("--otlp-endpoint %q: want an http:// or https:// URL such as http://otel-collector:4318", o.Endpoint)}
	}
	if o.Interval <= 0 {
		return usageError{fmt.Errorf("--otlp-interval must be positive (got %v)", o.Interval)}
	}
	o.headers = map[string]string{}
	for _, h := range o.Headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return usageError{fmt.Errorf("--otlp-header %q: want Name=value", h)}
		}
		o.headers[strings.TrimSpace(k)] = v
	}
	return nil
}

// start starts the export of reg's figures (nil when there is none to
// make); id names this collector (collectorID), as its metrics' collector
// label does. What the OpenTelemetry SDK reports (a failed export) goes
// to log, in the server's --log-format.
func (o *otlpOptions) start(ctx context.Context, reg prometheus.Gatherer, id string, log *slog.Logger) (*otelexport.Exporter, error) {
	if o.Endpoint == "" {
		return nil, nil
	}
	exp, err := otelexport.New(ctx, otelexport.Config{Endpoint: o.Endpoint, Interval: o.Interval, Headers: o.headers, Gatherer: reg, CollectorID: id, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	return exp, nil
}

// collectorID names this collector among collectors sharing one database,
// in its metrics (label collector) and its OTLP export
// (service.instance.id): the host name and the port of addr (--addr).
// "" when addr has no fixed port (":0"): the collector then uses its
// cluster node id.
func collectorID(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return ""
	}
	host, _ := os.Hostname()
	return host + ":" + port
}
