package otelexport

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
)

// The OpenTelemetry SDK reports what goes wrong in its own goroutines (a
// periodic export that failed: a receiver's 4xx or 5xx, a connection
// refused, a timeout) to a process-wide error handler, and its warnings
// and debug lines to a process-wide logr logger; by default both print
// plain text with the standard log package, whatever the server's
// --log-format. Each Exporter sends them to its Config.Logger instead:
// New installs a handler and a logger (once per process) that write to
// the loggers of the exporters running (in a process with one exporter,
// its logger), and to slog.Default() when none runs.

// sdkLogs holds the loggers of the running exporters.
var sdkLogs struct {
	once    sync.Once
	mu      sync.Mutex
	loggers map[*Exporter]*slog.Logger
}

// routeSDKLogs sends the SDK's errors and log lines to l while e runs
// (until unrouteSDKLogs(e)).
func routeSDKLogs(e *Exporter, l *slog.Logger) {
	sdkLogs.once.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			for _, l := range sdkLoggers() {
				l.Error("OTLP export: the OpenTelemetry SDK reports an error", "err", err)
			}
		}))
		otel.SetLogger(logr.New(sdkSink{}))
	})
	sdkLogs.mu.Lock()
	defer sdkLogs.mu.Unlock()
	if sdkLogs.loggers == nil {
		sdkLogs.loggers = map[*Exporter]*slog.Logger{}
	}
	sdkLogs.loggers[e] = l
}

func unrouteSDKLogs(e *Exporter) {
	sdkLogs.mu.Lock()
	defer sdkLogs.mu.Unlock()
	delete(sdkLogs.loggers, e)
}

// sdkLoggers are the loggers to write the SDK's lines to, copied so that
// no lock is held while they write.
func sdkLoggers() []*slog.Logger {
	sdkLogs.mu.Lock()
	defer sdkLogs.mu.Unlock()
	if len(sdkLogs.loggers) == 0 {
		return []*slog.Logger{slog.Default()}
	}
	out := make([]*slog.Logger, 0, len(sdkLogs.loggers))
	for _, l := range sdkLogs.loggers {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// sdkLevel maps the SDK's logr verbosity to a slog level: the SDK logs
// its warnings at V(1), information at V(4) and debug lines at V(8)
// (go.opentelemetry.io/otel/internal/global), of which its default
// logger shows none. Warnings are Warn; its information (the whole
// resource when a provider is made) is Debug; its debug lines print the
// data of every export, so they go below slog's Debug, which a server's
// --log-level debug does not show.
func sdkLevel(v int) slog.Level {
	switch {
	case v >= 8:
		return slog.LevelDebug - 4
	case v >= 4:
		return slog.LevelDebug
	case v >= 1:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// sdkSink is the logr sink of the SDK's logger: each line goes to every
// logger of sdkLoggers, with the logr name and values as attributes.
type sdkSink struct {
	name   string
	values []any
}

func (sdkSink) Init(logr.RuntimeInfo) {}

func (s sdkSink) Enabled(level int) bool {
	for _, l := range sdkLoggers() {
		if l.Enabled(context.Background(), sdkLevel(level)) {
			return true
		}
	}
	return false
}

func (s sdkSink) Info(level int, msg string, kv ...any) {
	for _, l := range sdkLoggers() {
		l.Log(context.Background(), sdkLevel(level), "OpenTelemetry SDK: "+msg, s.attrs(kv)...)
	}
}

func (s sdkSink) Error(err error, msg string, kv ...any) {
	for _, l := range sdkLoggers() {
		l.Error("OpenTelemetry SDK: "+msg, append([]any{"err", err}, s.attrs(kv)...)...)
	}
}

func (s sdkSink) attrs(kv []any) []any {
	out := slices.Concat(s.values, kv)
	if s.name != "" {
		out = append(out, "logger", s.name)
	}
	return out
}

func (s sdkSink) WithValues(kv ...any) logr.LogSink {
	s.values = slices.Concat(s.values, kv)
	return s
}

func (s sdkSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	s.name = name
	return s
}
