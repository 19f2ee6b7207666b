package live

import (
	"fmt"
	"sort"

	"github.com/cbdash/cbdash"
)

// Targets picks the instances of dependency k an operator command goes
// to, sorted by name: instance alone when set (cbdash.ErrNotFound when it
// does not declare k's breaker); else share percent of the live
// instances (0 or 100: every known instance, stale ones included), each
// in or out by the stable hash of its id (cbdash.InShare). Errors wrap
// cbdash.ErrNotFound: an unknown dependency or instance, or a share that
// no live instance falls in.
func (l *State) Targets(k cbdash.DependencyKey, instance string, share float64) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.deps[k]
	if d == nil {
		return nil, fmt.Errorf("breaker %s: %w", k, cbdash.ErrNotFound)
	}
	if instance != "" {
		if inst := l.instances[Key{k.Service, instance}]; inst == nil || inst.breakers[k.Breaker] == nil {
			return nil, fmt.Errorf("instance %q of breaker %s: %w", instance, k, cbdash.ErrNotFound)
		}
		return []string{instance}, nil
	}
	var names []string
	for _, ib := range d.members {
		if share == 0 || share == 100 || !ib.inst.stale {
			names = append(names, ib.inst.key.Instance)
		}
	}
	if share == 0 || share == 100 {
		sort.Strings(names)
		return names, nil
	}
	in := names[:0]
	for _, n := range names {
		if cbdash.InShare(n, share) {
			in = append(in, n)
		}
	}
	if len(in) == 0 {
		return nil, fmt.Errorf("no live instance of breaker %s falls in a %v%% share: %w", k, share, cbdash.ErrNotFound)
	}
	sort.Strings(in)
	return in, nil
}

// Conns returns the connections of the named instances of service that
// are connected here.
func (l *State) Conns(service string, instances []string) []Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Conn
	for _, name := range instances {
		if inst := l.instances[Key{service, name}]; inst != nil && inst.sess != nil {
			out = append(out, inst.sess)
		}
	}
	return out
}
