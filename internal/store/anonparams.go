package store

import (
	"strings"
	"sync"
)

// anonymousParams returns values, a multi-row statement's parameters as
// placeholders writes them ("($1, $2), ($3, $4)...", numbered from $1 in
// the order they appear, each once), with every "$N" written "?": the
// same parameters for SQLite, bound by position. Any other numbering is
// returned unchanged. Cached by values.
//
// Why: modernc.org/sqlite binds each parameter after asking SQLite its
// name (sqlite3_bind_parameter_name), and SQLite finds the name of a
// named parameter ($1 is one there) by walking the statement's list of
// names. Binding a statement of n named parameters so takes n²/2 steps:
// 320,000 for the 800 of a 100-row instance-minute upsert, 7% of the
// server's CPU at 1,000 instances x 20 breakers (docs/benchmarks.md,
// issue 36). Anonymous parameters have no name to walk for.
func anonymousParams(values string) string {
	if p, ok := anonCache.Load(values); ok {
		return p.(string)
	}
	var b strings.Builder
	b.Grow(len(values))
	next := 1
	for i := 0; i < len(values); i++ {
		c := values[i]
		if c != '$' {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		n := 0
		for j < len(values) && values[j] >= '0' && values[j] <= '9' && n <= 1<<20 {
			n = n*10 + int(values[j]-'0')
			j++
		}
		if j == i+1 || n != next {
			return values // not numbered in order: left as it is
		}
		b.WriteByte('?')
		next++
		i = j - 1
	}
	p := b.String()
	anonCache.Store(values, p)
	return p
}

// anonCache holds anonymousParams' answers: one per statement shape.
var anonCache sync.Map
