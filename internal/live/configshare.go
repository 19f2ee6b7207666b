package live

import (
	"slices"
	"unsafe"
	"weak"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// sharedLists are the breaker lists of the hellos live state holds,
// per service, for hellos with an equal list to share one (the instances
// of a service mostly declare the same breakers, configured alike: at
// 1,000 instances x 20 breakers, 4 MB of equal lists, and their names).
// They are held weakly: a list is forgotten once no hello (live state's,
// a session's, a watcher's line) points at it. Guarded by live.mu.
type sharedLists map[string][]sharedList

// sharedList is one list: its first configuration, weakly, and its
// length (the list is the array from there, of the hello that brought
// it; no hello's list is written once handed to live state).
type sharedList struct {
	first weak.Pointer[protocol.BreakerConfig]
	n     int
}

// maxSharedLists bounds the lists remembered per service (the newest
// are kept): a service whose instances declare a few variants (a
// configuration rolling out) shares each, one whose every instance
// differs costs a few comparisons per hello.
const maxSharedLists = 4

// share returns a list equal to bs (same configurations, in the same
// order) that a hello of service holds already, or else bs, remembered
// for the next hellos.
func (s sharedLists) share(service string, bs []protocol.BreakerConfig) []protocol.BreakerConfig {
	if len(bs) == 0 {
		return bs
	}
	known := s[service]
	kept := known[:0]
	var found []protocol.BreakerConfig
	for _, sl := range known {
		p := sl.first.Value()
		if p == nil {
			continue // no hello holds it any more
		}
		kept = append(kept, sl)
		// A list is the array of its hello from its first configuration:
		// alive, as p keeps it alive, and n long.
		if l := unsafe.Slice(p, sl.n); found == nil && slices.Equal(l, bs) {
			found = l
		}
	}
	clear(known[len(kept):]) // no stale weak pointers past the end
	if found == nil {
		if len(kept) == maxSharedLists {
			kept = append(kept[:0], kept[1:]...)
		}
		kept = append(kept, sharedList{first: weak.Make(&bs[0]), n: len(bs)})
		found = bs
	}
	s[service] = kept
	return found
}

// forget drops service's lists that no hello holds any more, and
// service when none is left.
func (s sharedLists) forget(service string) {
	kept := s[service][:0]
	for _, sl := range s[service] {
		if sl.first.Value() != nil {
			kept = append(kept, sl)
		}
	}
	if len(kept) == 0 {
		delete(s, service)
		return
	}
	s[service] = kept
}
