package live

import (
	"sort"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// InstanceInfo is what live state knows of one instance, as the holds
// read it to decide what each instance is sent.
type InstanceInfo struct {
	Ref       cbdash.InstanceRef
	StartedAt int64
	Breakers  []string           // sorted
	Rates     map[string]float64 // calls per second of each breaker's last report (none before one; nil when none has one)
	// Last is the counts of each breaker's last report (as Rates).
	Last map[string]protocol.Counts
	// Unsupported says why a breaker cannot be held (its hello set
	// holds_unsupported, cbdash.HoldsUnsupported).
	Unsupported map[string]string
	Conn        Conn // connected here, nil when not
	Stale       bool
	// Pull is set for an instance that reports over HTTP ingest (no
	// connection) and is not stale.
	Pull bool
}

// Instances lists every instance (connected or not), by service and
// instance id. It holds live state's lock only to copy them (sorted
// after: a hold covering a thousand instances lists them, while the
// hellos of every instance wait for that lock).
func (l *State) Instances() []InstanceInfo {
	l.mu.Lock()
	out := make([]InstanceInfo, 0, len(l.instances))
	for _, inst := range l.instances {
		out = append(out, infoOf(inst))
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ref.Service != out[j].Ref.Service {
			return out[i].Ref.Service < out[j].Ref.Service
		}
		return out[i].Ref.Instance < out[j].Ref.Instance
	})
	return out
}

// Instance returns one instance; ok is false when it is unknown.
func (l *State) Instance(k Key) (InstanceInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	inst := l.instances[k]
	if inst == nil {
		return InstanceInfo{}, false
	}
	return infoOf(inst), true
}

func infoOf(inst *instance) InstanceInfo {
	hi := InstanceInfo{Ref: cbdash.InstanceRef{Service: inst.key.Service, Instance: inst.key.Instance, Labels: inst.labels},
		StartedAt: inst.startedAt, Conn: inst.sess, Stale: inst.stale, Pull: inst.pull && inst.sess == nil && !inst.stale,
		Breakers: make([]string, 0, len(inst.breakers))}
	for name, ib := range inst.breakers {
		hi.Breakers = append(hi.Breakers, name)
		if why, ok := cbdash.HoldsUnsupported(*ib.config); ok {
			if hi.Unsupported == nil {
				hi.Unsupported = make(map[string]string)
			}
			hi.Unsupported[name] = why
		}
		if ib.last.Millis > 0 {
			if hi.Rates == nil {
				hi.Rates = make(map[string]float64, len(inst.breakers))
				hi.Last = make(map[string]protocol.Counts, len(inst.breakers))
			}
			hi.Last[name] = ib.last.Counts
			hi.Rates[name] = float64(ib.last.Counts.Admitted+ib.last.Counts.Rejected()) / (float64(ib.last.Millis) / 1000)
		}
	}
	sort.Strings(hi.Breakers)
	return hi
}
