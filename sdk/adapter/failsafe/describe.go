package failsafe

import (
	"reflect"
	"strconv"
	"time"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// setting is one failsafe-go builder setting: its name on the dashboard
// and the unexported field of the built breaker that holds it.
type setting struct {
	name, field string
}

var settings = []setting{
	{"FailureThreshold", "failureThreshold"},
	{"FailureThresholdingCapacity", "failureThresholdingCapacity"},
	{"FailureRateThreshold", "failureRateThreshold"},
	{"FailureExecutionThreshold", "failureExecutionThreshold"},
	{"FailureThresholdingPeriod", "failureThresholdingPeriod"},
	{"SuccessThreshold", "successThreshold"},
	{"SuccessThresholdingCapacity", "successThresholdingCapacity"},
	{"Delay", "Delay"},
	{"DelayMin", "delayMin"},
	{"DelayMax", "delayMax"},
	{"Jitter", "jitter"},
	{"JitterFactor", "jitterFactor"},
}

// readSettings reads cb's settings by reflection, read-only; a field it
// cannot find is left out.
func readSettings(cb any) map[string]reflect.Value {
	v := reflect.ValueOf(cb)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	out := map[string]reflect.Value{}
	for _, s := range settings {
		if f := v.FieldByName(s.field); f.IsValid() {
			out[s.name] = f
		}
	}
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// describe returns the hello's configuration of the breaker called name
// and its failure-rate threshold in percent.
func describe(name string, cb any) (protocol.BreakerConfig, float64) {
	fields := readSettings(cb)
	text := map[string]string{}
	num := map[string]float64{}
	for n, f := range fields {
		switch {
		case f.Type() == durationType:
			d := time.Duration(f.Int())
			num[n] = float64(d)
			if d != 0 || n == "Delay" {
				text[n] = d.String()
			}
		case f.CanUint():
			num[n] = float64(f.Uint())
			if f.Uint() != 0 || n == "FailureThreshold" {
				text[n] = strconv.FormatUint(f.Uint(), 10)
			}
		case f.CanFloat():
			num[n] = f.Float()
			if f.Float() != 0 {
				text[n] = strconv.FormatFloat(f.Float(), 'g', -1, 64)
			}
		}
	}
	cfg := protocol.BreakerConfig{Name: name, Library: Library, Settings: protocol.NewSettings(text),
		OpenDurationMillis: time.Duration(num["Delay"]).Milliseconds()}
	// The protocol's equivalents, as failsafe-go's closed state judges.
	var threshold float64
	capacity := num["FailureThresholdingCapacity"]
	if num["FailureExecutionThreshold"] != 0 {
		capacity = num["FailureExecutionThreshold"]
	}
	switch {
	case num["FailureRateThreshold"] != 0:
		threshold = num["FailureRateThreshold"] * 100
	case capacity != 0:
		threshold = min(num["FailureThreshold"]*100/capacity, 100)
	}
	cfg.FailureRateThreshold = threshold
	cfg.MinimumCalls = int(num["FailureExecutionThreshold"])
	if p := time.Duration(num["FailureThresholdingPeriod"]); p != 0 {
		cfg.WindowKind, cfg.WindowMillis, cfg.WindowBuckets = "time", p.Milliseconds(), 10
	} else {
		cfg.WindowKind, cfg.WindowSize = "count", int(capacity)
		cfg.MinimumCalls = int(capacity)
	}
	probes := num["SuccessThresholdingCapacity"]
	if probes == 0 {
		probes = capacity
	}
	cfg.HalfOpenMaxCalls = int(probes)
	cfg.HalfOpenSuccessThreshold = int(num["SuccessThreshold"])
	return cfg, threshold
}
