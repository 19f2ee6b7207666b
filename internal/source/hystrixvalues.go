package source

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The values of a HystrixCommand record as its writers send them. A
// single service writes JSON numbers, booleans and strings. Turbine, which
// merges the streams of a cluster's hosts into one, changes them:
//
//   - Turbine 1.x (com.netflix.turbine.data.AggDataFromCluster, which
//     Spring Cloud Netflix Turbine runs) sums every integer over the
//     hosts, settings (propertyValue_*) included, keeps other values as
//     strings ("true", "false", "33.3") and writes values the hosts
//     disagree on as a string of each value's count of hosts:
//     "{false:1,true:1}".
//   - Turbine 2 (com.netflix.turbine.aggregator.StreamAggregator) sums
//     numbers but not settings, and writes every other value as the one
//     all hosts reported (true and false as booleans, others as strings:
//     a threshold of 50 is "50") or, when they disagree, as an object of
//     each value's count of hosts: {"false":1,"true":1}.
//
// Both write reportingHosts, the sum of each host's 1: how many hosts the
// record stands for. A value that cannot be read keeps its error (err),
// and the record is refused as malformed once decoded (hystrixCommand.bad).

// hystrixNum is a number of a record.
type hystrixNum struct {
	v      float64 // the number; of values by host, the one most hosts reported (the largest of a tie)
	set    bool    // present and not null
	summed bool    // a JSON number: summed over the hosts by Turbine 1.x (and, for counts, by Turbine 2)
	byHost bool    // the hosts' values with their counts of hosts
	values int     // byHost: how many different values
	err    error
}

func (n *hystrixNum) UnmarshalJSON(b []byte) error {
	*n = hystrixNum{}
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			n.err = err
			return nil
		}
		if strings.HasPrefix(s, "{") {
			n.fromCounts(turbineCounts(s))
			return nil
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			n.err = fmt.Errorf("%q is not a number", truncate(s, 40))
			return nil
		}
		n.v, n.set = v, true
	case len(b) > 0 && b[0] == '{':
		n.fromCounts(objectCounts(b))
	default:
		v, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			n.err = fmt.Errorf("%s is not a number", truncate(string(b), 40))
			return nil
		}
		n.v, n.set, n.summed = v, true, true
	}
	return nil
}

// fromCounts takes the hosts' values, each with its count of hosts.
func (n *hystrixNum) fromCounts(counts map[string]float64, err error) {
	if err != nil {
		n.err = err
		return
	}
	best, bestHosts := math.Inf(-1), -1.0
	for k, hosts := range counts {
		v, err := strconv.ParseFloat(strings.TrimSpace(k), 64)
		if err != nil {
			n.err = fmt.Errorf("the value %q of a host is not a number", truncate(k, 40))
			return
		}
		if hosts > bestHosts || (hosts == bestHosts && v > best) {
			best, bestHosts = v, hosts
		}
	}
	if len(counts) == 0 {
		return
	}
	n.v, n.set, n.byHost, n.values = best, true, true, len(counts)
}

// perHost is the value of one host, for a record that stands for hosts
// hosts: a setting that Turbine 1.x summed is divided back.
func (n hystrixNum) perHost(hosts float64) float64 {
	if n.summed && hosts > 1 {
		return n.v / hosts
	}
	return n.v
}

// hystrixBool is a boolean of a record: true or false, or the hosts' values.
type hystrixBool struct {
	set     bool
	v       bool // a single value (for a record of hosts: all of them)
	counted bool // yes and no count the hosts
	yes, no float64
	err     error
}

func (x *hystrixBool) UnmarshalJSON(b []byte) error {
	*x = hystrixBool{}
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		return nil
	case string(b) == "true", string(b) == "false":
		x.set, x.v = true, string(b) == "true"
		return nil
	case len(b) > 0 && b[0] == '{':
		x.fromCounts(objectCounts(b))
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			x.err = err
			return nil
		}
		switch s = strings.TrimSpace(s); {
		case s == "true" || s == "false":
			x.set, x.v = true, s == "true"
		case strings.HasPrefix(s, "{"):
			x.fromCounts(turbineCounts(s))
		default:
			x.err = fmt.Errorf("%q is not a boolean", truncate(s, 40))
		}
		return nil
	}
	x.err = fmt.Errorf("%s is not a boolean", truncate(string(b), 40))
	return nil
}

func (x *hystrixBool) fromCounts(counts map[string]float64, err error) {
	if err != nil {
		x.err = err
		return
	}
	for k, hosts := range counts {
		switch strings.TrimSpace(k) {
		case "true":
			x.yes += hosts
		case "false":
			x.no += hosts
		default:
			x.err = fmt.Errorf("the value %q of a host is not a boolean", truncate(k, 40))
			return
		}
	}
	x.set, x.counted, x.v = true, true, x.no == 0 && x.yes > 0
}

// trueHosts is how many of hosts hosts reported true.
func (x hystrixBool) trueHosts(hosts float64) float64 {
	switch {
	case x.counted:
		return x.yes
	case x.v:
		return hosts
	}
	return 0
}

// any reports whether a host reported true.
func (x hystrixBool) any() bool { return x.v || x.yes > 0 }

// hystrixText is a string of a record, or the hosts' values: the one most
// hosts reported.
type hystrixText struct {
	v   string
	err error
}

func (t *hystrixText) UnmarshalJSON(b []byte) error {
	*t = hystrixText{}
	b = bytes.TrimSpace(b)
	var counts map[string]float64
	var err error
	switch {
	case string(b) == "null":
		return nil
	case len(b) > 0 && b[0] == '{':
		counts, err = objectCounts(b)
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			t.err = err
			return nil
		}
		if !strings.HasPrefix(s, "{") {
			t.v = s
			return nil
		}
		counts, err = turbineCounts(s)
	default:
		t.err = fmt.Errorf("%s is not a string", truncate(string(b), 40))
		return nil
	}
	if err != nil {
		t.err = err
		return nil
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	if len(keys) > 0 {
		t.v = keys[0]
	}
	return nil
}

// maxHostValues bounds the values of one field a record of hosts may
// list.
const maxHostValues = 1000

// objectCounts reads Turbine 2's {"value": hosts, ...}.
func objectCounts(b []byte) (map[string]float64, error) {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("the hosts' values %s: %w", truncate(string(b), 60), err)
	}
	return checkCounts(m)
}

// turbineCounts reads Turbine 1.x's "{value:hosts,...}" (its JSON of the
// counts with every quote removed).
func turbineCounts(s string) (map[string]float64, error) {
	inner, ok := strings.CutPrefix(strings.TrimSpace(s), "{")
	if ok {
		inner, ok = strings.CutSuffix(inner, "}")
	}
	if !ok {
		return nil, fmt.Errorf("the hosts' values %q are not within { }", truncate(s, 60))
	}
	m := map[string]float64{}
	for part := range strings.SplitSeq(inner, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		i := strings.LastIndexByte(part, ':')
		if i < 0 {
			return nil, fmt.Errorf("the hosts' values %q: %q has no count", truncate(s, 60), truncate(part, 20))
		}
		hosts, err := strconv.ParseFloat(strings.TrimSpace(part[i+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("the hosts' values %q: %q has no count", truncate(s, 60), truncate(part, 20))
		}
		m[strings.TrimSpace(part[:i])] += hosts
		if len(m) > maxHostValues {
			break
		}
	}
	return checkCounts(m)
}

func checkCounts(m map[string]float64) (map[string]float64, error) {
	if len(m) > maxHostValues {
		return nil, fmt.Errorf("the hosts' values list more than %d values", maxHostValues)
	}
	for k, hosts := range m {
		if hosts != hosts || hosts < 0 || hosts > MaxRecordNumber {
			return nil, fmt.Errorf("the hosts' value %q has %g hosts", truncate(k, 20), hosts)
		}
		if hosts == 0 {
			delete(m, k)
		}
	}
	return m, nil
}
