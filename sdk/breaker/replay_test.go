package breaker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// The scenario replayer: it drives one breaker per file on a virtual clock
// and checks it against the file, as ../../../shared/scenarios/FORMAT.md
// (copied into testdata/scenarios) describes.

type scenario struct {
	Name   string          `json:"name"`
	About  string          `json:"about"`
	Config json.RawMessage `json:"config"`
	Steps  []json.RawMessage
}

type scenarioConfig struct {
	Window *struct {
		Kind    string `json:"kind"`
		Size    *int   `json:"size"`
		SizeMs  *int64 `json:"size_ms"`
		Buckets *int   `json:"buckets"`
	} `json:"window"`
	FailureRateThreshold  *float64 `json:"failure_rate_threshold"`
	SlowCallDurationMs    *int64   `json:"slow_call_duration_ms"`
	SlowCallRateThreshold *float64 `json:"slow_call_rate_threshold"`
	MinimumCalls          *int     `json:"minimum_calls"`
	OpenDurationMs        *int64   `json:"open_duration_ms"`
	OpenBackoff           *struct {
		Multiplier float64 `json:"multiplier"`
		MaxMs      int64   `json:"max_ms"`
	} `json:"open_backoff"`
	HalfOpenMaxCalls         *int   `json:"half_open_max_calls"`
	HalfOpenSuccessThreshold *int   `json:"half_open_success_threshold"`
	CallTimeoutMs            *int64 `json:"call_timeout_ms"`
	MaxConcurrent            *int   `json:"max_concurrent"`
	RampDurationMs           *int64 `json:"ramp_duration_ms"`
}

type step struct {
	AtMs              *int64    `json:"at_ms"`
	Call              *string   `json:"call"`
	DurationMs        *int64    `json:"duration_ms"`
	Repeat            *int      `json:"repeat"`
	EveryMs           *int64    `json:"every_ms"`
	Expect            *string   `json:"expect"`
	Begin             *string   `json:"begin"`
	End               *string   `json:"end"`
	Outcome           *string   `json:"outcome"`
	Command           *string   `json:"command"`
	TTLMs             *int64    `json:"ttl_ms"`
	ExpectState       *string   `json:"expect_state"`
	ExpectTransitions *[]string `json:"expect_transitions"`
	ExpectWindow      *struct {
		Calls    *int64 `json:"calls"`
		Failures *int64 `json:"failures"`
		Slow     *int64 `json:"slow"`
	} `json:"expect_window"`
	ExpectTotals *struct {
		Admitted  *uint64 `json:"admitted"`
		Rejected  *uint64 `json:"rejected"`
		Successes *uint64 `json:"successes"`
		Failures  *uint64 `json:"failures"`
		Timeouts  *uint64 `json:"timeouts"`
		Slow      *uint64 `json:"slow"`
		Ignored   *uint64 `json:"ignored"`
	} `json:"expect_totals"`
}

// stepFields lists, for each step kind, the other fields it may have.
var stepFields = map[string][]string{
	"call":               {"at_ms", "duration_ms", "repeat", "every_ms", "expect"},
	"begin":              {"at_ms", "expect"},
	"end":                {"at_ms", "outcome"},
	"command":            {"at_ms", "ttl_ms"},
	"expect_state":       {"at_ms"},
	"expect_transitions": {"at_ms"},
	"expect_window":      {"at_ms"},
	"expect_totals":      {"at_ms"},
}

var outcomes = map[string]bool{"ok": true, "error": true, "timeout": true, "panic": true, "ignored": true, "canceled": true}

// replayDir replays every *.json file of dir in name order, writing one
// PASS or FAIL line per file to out. It returns how many files failed.
func replayDir(dir string, out io.Writer) (failed int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no *.json scenario files in %s", dir)
	}
	slices.Sort(files)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if err := replayFile(f); err != nil {
			failed++
			fmt.Fprintf(out, "FAIL %s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(out, "PASS %s\n", name)
	}
	return failed, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// replayFile replays one scenario file; the error says which step failed
// and what differed.
func replayFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var sc scenario
	if err := decodeStrict(data, &sc); err != nil {
		return fmt.Errorf("file: %w", err)
	}
	if len(sc.Steps) == 0 {
		return errors.New("file: no steps")
	}
	cfg, timeout, err := buildConfig(sc.Config)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	r := newReplayer(cfg, timeout)
	if r.err != nil {
		return fmt.Errorf("config: %w", r.err)
	}
	for i, raw := range sc.Steps {
		if err := r.step(raw); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

func buildConfig(raw json.RawMessage) (breaker.Config, int64, error) {
	var c scenarioConfig
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	if err := decodeStrict(raw, &c); err != nil {
		return breaker.Config{}, 0, err
	}
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	// The format's defaults, set explicitly so that they do not depend on
	// the breaker's.
	cfg := breaker.Config{
		Window:                   breaker.Window{Kind: breaker.CountWindow, Size: 100},
		FailureRateThreshold:     50,
		SlowCallRateThreshold:    100,
		MinimumCalls:             10,
		OpenDuration:             60 * time.Second,
		HalfOpenMaxCalls:         1,
		HalfOpenSuccessThreshold: 1,
	}
	if w := c.Window; w != nil {
		switch w.Kind {
		case "count":
			if w.SizeMs != nil || w.Buckets != nil {
				return cfg, 0, errors.New("window: a count window has only kind and size")
			}
			if w.Size == nil || *w.Size <= 0 {
				return cfg, 0, errors.New("window: a count window needs a size > 0")
			}
			cfg.Window.Size = *w.Size
		case "time":
			if w.Size != nil {
				return cfg, 0, errors.New("window: a time window has size_ms and buckets, not size")
			}
			if w.SizeMs == nil || w.Buckets == nil || *w.SizeMs <= 0 || *w.Buckets <= 0 {
				return cfg, 0, errors.New("window: a time window needs size_ms > 0 and buckets > 0")
			}
			if *w.SizeMs%int64(*w.Buckets) != 0 {
				return cfg, 0, fmt.Errorf("window: size_ms %d is not a multiple of buckets %d", *w.SizeMs, *w.Buckets)
			}
			cfg.Window = breaker.Window{Kind: breaker.TimeWindow, Duration: ms(*w.SizeMs), Buckets: *w.Buckets}
		default:
			return cfg, 0, fmt.Errorf("window: unknown kind %q", w.Kind)
		}
	}
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	setInt := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setMs := func(dst *time.Duration, v *int64) {
		if v != nil {
			*dst = ms(*v)
		}
	}
	set(&cfg.FailureRateThreshold, c.FailureRateThreshold)
	set(&cfg.SlowCallRateThreshold, c.SlowCallRateThreshold)
	setMs(&cfg.SlowCallDuration, c.SlowCallDurationMs)
	setInt(&cfg.MinimumCalls, c.MinimumCalls)
	setMs(&cfg.OpenDuration, c.OpenDurationMs)
	setInt(&cfg.HalfOpenMaxCalls, c.HalfOpenMaxCalls)
	setInt(&cfg.HalfOpenSuccessThreshold, c.HalfOpenSuccessThreshold)
	setMs(&cfg.CallTimeout, c.CallTimeoutMs)
	setInt(&cfg.MaxConcurrent, c.MaxConcurrent)
	setMs(&cfg.RampDuration, c.RampDurationMs)
	if b := c.OpenBackoff; b != nil {
		cfg.OpenBackoff = breaker.Backoff{Multiplier: b.Multiplier, Max: ms(b.MaxMs)}
	}
	var timeout int64
	if c.CallTimeoutMs != nil {
		timeout = *c.CallTimeoutMs
	}
	return cfg, timeout, nil
}

type replayer struct {
	clk       *breakertest.Clock
	t0        time.Time
	b         *breaker.Breaker
	err       error
	timeoutMs int64
	nowMs     int64
	callEnd   int64 // when the last call step ended
	trans     []string
	inFlight  map[string]breaker.Call
	begun     map[string]bool
}

func newReplayer(cfg breaker.Config, timeoutMs int64) *replayer {
	t0 := breakertest.Epoch()
	r := &replayer{
		clk: breakertest.NewClock(t0), t0: t0, timeoutMs: timeoutMs,
		inFlight: map[string]breaker.Call{}, begun: map[string]bool{},
	}
	cfg.Clock = r.clk
	r.b, r.err = breaker.New("scenario", cfg)
	if r.err == nil {
		r.b.Subscribe(func(t breaker.Transition) {
			r.trans = append(r.trans, t.From.String()+">"+t.To.String())
		})
	}
	return r
}

// advance moves the virtual clock to ms, firing the timers due by then:
// the call timeouts (real timers on the virtual clock) and the breaker's
// lazy ones (open duration elapsed, forced-state expiry), which FORMAT.md
// counts as timers too and which fire when something looks at the state.
func (r *replayer) advance(ms int64) {
	r.clk.Set(r.t0.Add(time.Duration(ms) * time.Millisecond))
	r.nowMs = ms
	r.b.State()
}

func (r *replayer) step(raw json.RawMessage) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return err
	}
	kind := ""
	for k := range keys {
		if _, ok := stepFields[k]; ok {
			if kind != "" {
				return fmt.Errorf("step has two kinds, %q and %q", kind, k)
			}
			kind = k
		}
	}
	if kind == "" {
		return fmt.Errorf("unknown step kind (fields %v)", slices.Sorted(maps.Keys(keys)))
	}
	for k := range keys {
		if k != kind && !slices.Contains(stepFields[kind], k) {
			return fmt.Errorf("unknown field %q in a %s step", k, kind)
		}
	}
	var s step
	if err := decodeStrict(raw, &s); err != nil {
		return err
	}
	at := r.nowMs
	if s.AtMs != nil {
		at = *s.AtMs
	}
	if at < r.callEnd {
		return fmt.Errorf("at_ms %d starts before the previous call step ended (%d)", at, r.callEnd)
	}
	if at < r.nowMs {
		return fmt.Errorf("at_ms %d goes back in time (now %d)", at, r.nowMs)
	}
	switch kind {
	case "call":
		return r.call(at, s)
	case "begin":
		return r.begin(at, *s.Begin, s.Expect)
	case "end":
		return r.end(at, *s.End, s.Outcome)
	case "command":
		r.advance(at)
		var ttl time.Duration
		if s.TTLMs != nil {
			if *s.TTLMs < 0 {
				return fmt.Errorf("ttl_ms %d is negative", *s.TTLMs)
			}
			ttl = time.Duration(*s.TTLMs) * time.Millisecond
		}
		switch a := breaker.Action(*s.Command); a {
		case breaker.ActionForceOpen, breaker.ActionForceClosed, breaker.ActionRelease, breaker.ActionReset:
			_, err := r.b.Apply(breaker.Command{ID: fmt.Sprint("c", at), Action: a, TTL: ttl})
			return err
		}
		return fmt.Errorf("unknown command %q", *s.Command)
	case "expect_state":
		if _, ok := breaker.ParseState(*s.ExpectState); !ok {
			return fmt.Errorf("unknown state %q", *s.ExpectState)
		}
		r.advance(at)
		if got := r.b.State().String(); got != *s.ExpectState {
			return fmt.Errorf("at %d ms: state is %s, want %s", at, got, *s.ExpectState)
		}
	case "expect_transitions":
		r.advance(at)
		if want := *s.ExpectTransitions; !slices.Equal(r.trans, want) {
			return fmt.Errorf("at %d ms: transitions are %v, want %v", at, r.trans, want)
		}
	case "expect_window":
		r.advance(at)
		snap := r.b.Snapshot()
		switch snap.State {
		case breaker.Open, breaker.HalfOpen:
			return fmt.Errorf("at %d ms: expect_window while %s (only closed and forced_closed keep a window)", at, snap.State)
		case breaker.ForcedOpen:
			return nil // only checked while closed or forced_closed
		}
		w := s.ExpectWindow
		for _, f := range []struct {
			name string
			want *int64
			got  int64
		}{{"calls", w.Calls, snap.Window.Calls}, {"failures", w.Failures, snap.Window.Failures}, {"slow", w.Slow, snap.Window.Slow}} {
			if f.want != nil && *f.want != f.got {
				return fmt.Errorf("at %d ms: window %s is %d, want %d (window %+v)", at, f.name, f.got, *f.want, snap.Window)
			}
		}
	case "expect_totals":
		r.advance(at)
		t := r.b.Snapshot().Totals
		w := s.ExpectTotals
		for _, f := range []struct {
			name string
			want *uint64
			got  uint64
		}{
			{"admitted", w.Admitted, t.Admitted}, {"rejected", w.Rejected, t.Rejected()},
			{"successes", w.Successes, t.Successes}, {"failures", w.Failures, t.Failures},
			{"timeouts", w.Timeouts, t.Timeouts}, {"slow", w.Slow, t.Slow}, {"ignored", w.Ignored, t.Ignored},
		} {
			if f.want != nil && *f.want != f.got {
				return fmt.Errorf("at %d ms: total %s is %d, want %d (totals %+v)", at, f.name, f.got, *f.want, t)
			}
		}
	}
	return nil
}

// errDependency is what a call with outcome "error" returns.
var errDependency = errors.New("dependency failed")

type replayPanic struct{}

func (r *replayer) call(at int64, s step) error {
	o := *s.Call
	if !outcomes[o] {
		return fmt.Errorf("unknown outcome %q", o)
	}
	var dur, every int64
	n := 1
	if s.DurationMs != nil {
		dur = *s.DurationMs
	}
	if s.Repeat != nil {
		n = *s.Repeat
	}
	if dur < 0 || n < 1 || (s.EveryMs != nil && *s.EveryMs < 0) {
		return errors.New("duration_ms, repeat or every_ms out of range")
	}
	if s.EveryMs != nil {
		every = *s.EveryMs
	}
	start := at
	for i := range n {
		if i > 0 && s.EveryMs != nil {
			start = at + int64(i)*every
			if start < r.callEnd {
				return fmt.Errorf("repetition %d starts at %d ms, before the one before ended (%d ms)", i+1, start, r.callEnd)
			}
		}
		r.advance(start)
		end := start + dur
		if r.timeoutMs > 0 && dur >= r.timeoutMs {
			end = start + r.timeoutMs
		}
		admitted, err := r.execute(o, end)
		if !admitted {
			end = start
		}
		r.advance(end)
		r.callEnd = end
		if msg := checkExpect(s.Expect, admitted, err); msg != "" {
			return fmt.Errorf("call %d of %d at %d ms: %s", i+1, n, start, msg)
		}
		start = end
	}
	return nil
}

// execute runs one call through Breaker.Execute; the call moves the
// virtual clock to end and then ends with outcome o.
func (r *replayer) execute(o string, end int64) (admitted bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(replayPanic); !ok {
				panic(p)
			}
		}
	}()
	err = r.b.Execute(ctx, func(context.Context) error {
		admitted = true
		r.advance(end)
		switch o {
		case "error":
			return errDependency
		case "timeout":
			return context.DeadlineExceeded
		case "panic":
			panic(replayPanic{})
		case "ignored":
			return breaker.Ignorable(errors.New("card declined"))
		case "canceled":
			cancel()
			return ctx.Err()
		}
		return nil
	})
	return admitted, err
}

func (r *replayer) begin(at int64, name string, expect *string) error {
	if _, ok := r.inFlight[name]; ok {
		return fmt.Errorf("begin %q: a call of that name is already in flight", name)
	}
	r.advance(at)
	c, err := r.b.Allow()
	r.begun[name] = true
	if err == nil {
		r.inFlight[name] = c
	}
	if msg := checkExpect(expect, err == nil, err); msg != "" {
		return fmt.Errorf("begin %q at %d ms: %s", name, at, msg)
	}
	return nil
}

func (r *replayer) end(at int64, name string, outcome *string) error {
	if outcome == nil {
		return fmt.Errorf("end %q: outcome is required", name)
	}
	o, ok := map[string]breaker.Outcome{
		"ok": breaker.Success, "error": breaker.Failure, "timeout": breaker.Timeout,
		"panic": breaker.Panic, "ignored": breaker.Ignored, "canceled": breaker.Canceled,
	}[*outcome]
	if !ok {
		return fmt.Errorf("unknown outcome %q", *outcome)
	}
	if !r.begun[name] {
		return fmt.Errorf("end %q: no call of that name was begun", name)
	}
	r.advance(at)
	if c, ok := r.inFlight[name]; ok {
		delete(r.inFlight, name)
		c.Report(o)
	}
	return nil
}

// checkExpect returns what differs from an expect field, or "".
func checkExpect(expect *string, admitted bool, err error) string {
	if expect == nil {
		return ""
	}
	got := "admitted"
	if !admitted {
		got = "rejected:" + reason(err)
	}
	switch want := *expect; {
	case want == "admitted" || want == "rejected":
		if strings.HasPrefix(got, want) {
			return ""
		}
	case strings.HasPrefix(want, "rejected:"):
		if !slices.Contains([]string{"open", "half_open_full", "forced_open", "bulkhead", "ramp"}, strings.TrimPrefix(want, "rejected:")) {
			return fmt.Sprintf("unknown rejection reason in %q", want)
		}
		if got == want {
			return ""
		}
	default:
		return fmt.Sprintf("unknown expect %q", want)
	}
	return fmt.Sprintf("got %s, want %s", got, *expect)
}

func reason(err error) string {
	switch {
	case errors.Is(err, breaker.ErrOpen):
		return "open"
	case errors.Is(err, breaker.ErrHalfOpenFull):
		return "half_open_full"
	case errors.Is(err, breaker.ErrForcedOpen):
		return "forced_open"
	case errors.Is(err, breaker.ErrBulkheadFull):
		return "bulkhead"
	case errors.Is(err, breaker.ErrRamp):
		return "ramp"
	}
	return fmt.Sprintf("not a rejection (%v)", err)
}
