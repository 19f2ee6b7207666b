package store

import (
	"strconv"
	"strings"
)

// This file is transitional. writer.go, ingest.go and instance_minutes.go
// still spell their SQL as SQLite does, with "?" placeholders, two-argument
// max/min and json_each; rewriteLegacy turns such a query into PostgreSQL's
// spelling (dialect.q calls it for a query with "?" and no "$"). Once those
// files are written with $N placeholders and the dialect's methods
// (greatest, least, jsonEach, lowerHex), delete this file, its test and
// the legacy branch of dialect.q.

// rewriteLegacy returns the PostgreSQL spelling of a "?" query, once per
// query text: "?" becomes "$1", "$2"... (outside string literals);
// json_each(x) becomes jsonb_array_elements_text(CAST(x AS jsonb)); the
// two-argument scalar max(a, b) and min(a, b) become GREATEST and LEAST
// (max and min with one argument stay aggregates); hex(x) becomes
// upper(encode(x, 'hex')).
func (d *dialect) rewriteLegacy(query string) string {
	if v, ok := d.legacy.Load(query); ok {
		return v.(string)
	}
	out := rebind(rewriteCalls(query))
	d.legacy.Store(query, out)
	return out
}

// rebind numbers the "?" placeholders outside quoted text.
func rebind(query string) string {
	var b strings.Builder
	n := 0
	quote := byte(0)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// rewriteCalls rewrites the function calls PostgreSQL spells differently.
func rewriteCalls(query string) string {
	var b strings.Builder
	for i := 0; i < len(query); {
		name, ok := callAt(query, i)
		if !ok {
			b.WriteByte(query[i])
			i++
			continue
		}
		open := i + len(name)
		end := closingParen(query, open)
		if end < 0 {
			b.WriteByte(query[i])
			i++
			continue
		}
		inner := rewriteCalls(query[open+1 : end])
		switch lower := strings.ToLower(name); {
		case lower == "json_each":
			b.WriteString("jsonb_array_elements_text(CAST(" + inner + " AS jsonb))")
		case lower == "hex":
			b.WriteString("upper(encode(" + inner + ", 'hex'))")
		case (lower == "max" || lower == "min") && topLevelComma(inner):
			fn := "GREATEST"
			if lower == "min" {
				fn = "LEAST"
			}
			b.WriteString(fn + "(" + inner + ")")
		default:
			b.WriteString(query[i:open] + "(" + inner + ")")
		}
		i = end + 1
	}
	return b.String()
}

// callAt reports the name of a rewritten function called at query[i:]:
// a whole word directly followed by "(".
func callAt(query string, i int) (string, bool) {
	if i > 0 && isWord(query[i-1]) {
		return "", false
	}
	for _, name := range []string{"json_each", "hex", "max", "min"} {
		n := len(name)
		if i+n < len(query) && strings.EqualFold(query[i:i+n], name) && query[i+n] == '(' {
			return query[i : i+n], true
		}
	}
	return "", false
}

func isWord(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// closingParen returns the index of the parenthesis closing the one at
// open, or -1.
func closingParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func topLevelComma(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				return true
			}
		}
	}
	return false
}
