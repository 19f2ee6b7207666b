package source

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
)

// ParseTarget reads a target of kind (KindHystrix or KindPrometheus) from
// a flag's value: the URL, then comma-separated key=value options:
//
//	http://orders-1:8080/hystrix.stream,service=orders,instance=orders-1
//	http://pay-1:8081/actuator/prometheus,service=payments,interval=10s,header=Authorization: Bearer s3cret
//
// Keys: service (required), instance, interval (a Go duration), header
// ("Name: value", repeatable) and label ("key=value", repeatable). The
// target is checked as New checks it; errors wrap cbdash.ErrInvalid.
func ParseTarget(kind, spec string) (Target, error) {
	parts := strings.Split(spec, ",")
	t := Target{Kind: kind, URL: strings.TrimSpace(parts[0])}
	bad := func(format string, args ...any) (Target, error) {
		return Target{}, fmt.Errorf("source: %w: --%s %q: %s", cbdash.ErrInvalid, kind, spec, fmt.Sprintf(format, args...))
	}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return bad("option %q is not key=value", p)
		}
		switch k {
		case "service":
			t.Service = v
		case "instance":
			t.Instance = v
		case "interval":
			d, err := time.ParseDuration(v)
			if err != nil {
				return bad("interval: %v", err)
			}
			t.Interval = Duration(d)
		case "header":
			name, val, ok := strings.Cut(v, ":")
			if !ok {
				return bad("header %q is not \"Name: value\"", v)
			}
			if t.Header == nil {
				t.Header = map[string]string{}
			}
			t.Header[strings.TrimSpace(name)] = strings.TrimSpace(val)
		case "label":
			lk, lv, ok := strings.Cut(v, "=")
			if !ok {
				return bad("label %q is not key=value", v)
			}
			if t.Labels == nil {
				t.Labels = map[string]string{}
			}
			t.Labels[lk] = lv
		default:
			return bad("unknown option %q (service, instance, interval, header, label)", k)
		}
	}
	if err := t.validate(0); err != nil {
		return bad("%v", strings.TrimPrefix(err.Error(), "source: invalid input: targets[0]."))
	}
	return t, nil
}

// File is the JSON form of a sources file (serve --sources FILE):
//
//	{"targets": [
//	  {"kind": "hystrix", "url": "http://orders-1:8080/hystrix.stream", "service": "orders", "instance": "orders-1"},
//	  {"kind": "prometheus", "url": "http://pay-1:8081/actuator/prometheus", "service": "payments",
//	   "interval": "10s", "header": {"Authorization": "Bearer s3cret"}}
//	]}
type File struct {
	Targets []Target `json:"targets"`
}

// LoadFile reads a sources file. Unknown fields are refused; each target
// is checked as New checks it. Errors name the file and the field.
func LoadFile(path string) ([]Target, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sources file: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var file File
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("sources file %s: %w: %v", path, cbdash.ErrInvalid, err)
	}
	for i := range file.Targets {
		if err := file.Targets[i].validate(i); err != nil {
			return nil, fmt.Errorf("sources file %s: %w", path, err)
		}
	}
	return file.Targets, nil
}
