package store

import "context"

// Breaker rows another process deleted. The writer caches the id and last
// state of each breaker row it wrote (doc.go); rows are never renumbered,
// except that a hello deletes the rows of the breakers its instance no
// longer declares. A hello stored by this Store drops its own cache's
// entries, but one stored by another process sharing a PostgreSQL
// database (another collector) does not: this writer would go on writing
// a state to the deleted row's id, where it goes nowhere, instead of
// creating the row again as for a breaker no hello declared. The
// collectors tell each other on their bus (OnBreakersForgotten on the
// deleting side, ForgetBreakers on the others; internal/collector's
// forgetwire.go).

// OnBreakersForgotten sets fn (nil: none) to be called after the commit
// of each hello (SaveHello) that deleted breaker rows of instance
// (service, instance), on SaveHello's goroutine before it returns: fn must
// not block.
func (s *Store) OnBreakersForgotten(fn func(service, instance string)) {
	if fn == nil {
		s.forgotten.Store(nil)
		return
	}
	s.forgotten.Store(&fn)
}

// breakersForgotten calls OnBreakersForgotten's function, if any.
func (s *Store) breakersForgotten(service, instance string) {
	if fn := s.forgotten.Load(); fn != nil {
		(*fn)(service, instance)
	}
}

// ForgetBreakers drops the writer's cached breaker rows of instance
// (service, instance), whose rows another process's hello deleted: the
// writer reads (or creates) them again when it next writes them. It is
// queued with the writes, so the writes queued after it see it. Errors:
// ErrClosed, ctx's.
func (s *Store) ForgetBreakers(ctx context.Context, service, instance string) error {
	return s.w.do(ctx, &op{prompt: true, run: func(x *wtx) error {
		if r, ok := x.w.c.instances[instKey{service, instance}]; ok {
			delete(x.w.c.breakers, r.id)
		}
		return nil
	}})
}

// ForgetAllBreakers drops every cached breaker row of the writer (when
// the messages saying which were deleted may have been missed). Errors:
// ErrClosed, ctx's.
func (s *Store) ForgetAllBreakers(ctx context.Context) error {
	return s.w.do(ctx, &op{prompt: true, run: func(x *wtx) error {
		clear(x.w.c.breakers)
		return nil
	}})
}
