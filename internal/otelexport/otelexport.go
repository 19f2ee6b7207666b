// Package otelexport pushes the collector's per-dependency figures to an
// OpenTelemetry back end over OTLP/HTTP (protobuf), so that Grafana or any
// OTLP store can keep history beyond cbdash's retention.
//
// It exports what /metrics serves: the cbdash_* families of the same
// Prometheus gatherer, read through the OpenTelemetry Prometheus bridge at
// each export, so the two cannot disagree (the state of every dependency,
// the calls by outcome with failures, slow calls, rejections and
// fallbacks, the latency histogram, the instances per state, the number of
// dependencies open, and the collector's own figures). Counters and
// histograms are cumulative, as in Prometheus.
package otelexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// ErrInvalid is wrapped by the errors New returns for a bad Config; the
// message names the field.
var ErrInvalid = errors.New("otelexport: invalid config")

// Config says where and how often to export. Endpoint and Gatherer are
// required.
type Config struct {
	// Endpoint is the OTLP/HTTP receiver, http:// or https://, as a base
	// URL (http://otel-collector:4318, to which /v1/metrics is appended)
	// or with the full path of its metrics endpoint.
	Endpoint string
	// Interval is the time between exports (real time: the OpenTelemetry
	// SDK's periodic reader); 0 means 15s.
	Interval time.Duration
	// Headers are sent with every export (an API key of the back end).
	Headers map[string]string
	// Gatherer is the registry /metrics serves; its cbdash_* families are
	// exported.
	Gatherer promclient.Gatherer
	// CollectorID identifies this collector among several sharing one
	// database: the resource attributes service.instance.id and
	// cbdash.collector.id. service.name is "cbdash".
	CollectorID string
	// Timeout bounds each export request; 0 means 10s.
	Timeout time.Duration
	// Logger receives what the OpenTelemetry SDK reports while the
	// exporter runs: a periodic export that failed (Error, with the
	// SDK's error as "err"), the SDK's warnings (Warn) and information
	// (Info), in the logger's own format (the server's --log-format).
	// nil: slog.Default(). The SDK's error handler and logger are
	// process-wide (see logs.go): with several exporters running, each of
	// their loggers gets every line.
	Logger *slog.Logger
}

// Exporter exports periodically until Shutdown. Its methods are safe for
// concurrent use.
type Exporter struct {
	provider *sdkmetric.MeterProvider
}

// New starts exporting cfg.Gatherer's cbdash_* families to cfg.Endpoint
// every cfg.Interval. The first export happens after one interval (or at
// Flush). Errors: ErrInvalid naming a bad field.
func New(ctx context.Context, cfg Config) (*Exporter, error) {
	bad := func(field, why string) (*Exporter, error) {
		return nil, fmt.Errorf("%w: %s %s", ErrInvalid, field, why)
	}
	u, err := url.Parse(cfg.Endpoint)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return bad("Endpoint", fmt.Sprintf("%q is not an http:// or https:// URL", cfg.Endpoint))
	case cfg.Gatherer == nil:
		return bad("Gatherer", "is required")
	case cfg.Interval < 0:
		return bad("Interval", "is negative")
	case cfg.Timeout < 0:
		return bad("Timeout", "is negative")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/metrics"
	}
	if cfg.Interval == 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpointURL(u.String()), otlpmetrichttp.WithTimeout(cfg.Timeout)}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlpmetrichttp.WithHeaders(cfg.Headers))
	}
	exp, err := otlpmetrichttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otelexport: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "cbdash"),
		attribute.String("service.instance.id", cfg.CollectorID),
		attribute.String("cbdash.collector.id", cfg.CollectorID),
	))
	if err != nil {
		return nil, fmt.Errorf("otelexport: resource: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Exporter{}
	routeSDKLogs(e, cfg.Logger) // before the reader starts exporting
	reader := sdkmetric.NewPeriodicReader(exp,
		sdkmetric.WithInterval(cfg.Interval),
		sdkmetric.WithTimeout(cfg.Timeout),
		sdkmetric.WithProducer(prometheus.NewMetricProducer(prometheus.WithGatherer(cbdashOnly{cfg.Gatherer}))),
	)
	e.provider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	return e, nil
}

// Flush exports now and returns the export's error.
func (e *Exporter) Flush(ctx context.Context) error { return e.provider.ForceFlush(ctx) }

// Shutdown makes a last export and stops exporting; it returns the
// export's error (a second call returns an error of the SDK). The SDK's
// lines no longer go to the exporter's Logger after it.
func (e *Exporter) Shutdown(ctx context.Context) error {
	defer unrouteSDKLogs(e)
	return e.provider.Shutdown(ctx)
}

// cbdashOnly keeps the families whose names start with cbdash_: the
// figures of cbdash, not those of the Go runtime a registry may carry.
type cbdashOnly struct{ g promclient.Gatherer }

func (c cbdashOnly) Gather() ([]*dto.MetricFamily, error) {
	fams, err := c.g.Gather()
	out := fams[:0]
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "cbdash_") {
			out = append(out, f)
		}
	}
	return out, err
}
