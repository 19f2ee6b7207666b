package main

import (
	"fmt"
	"strings"
	"unicode"
)

// clean makes a name that came from an agent or a user safe to print on
// a terminal: control characters (ESC and so every ANSI sequence, CR,
// backspace, C1 controls) and bidirectional overrides are shown escaped
// (\x1b, \u202e) instead of being interpreted by the terminal.
func clean(s string) string {
	if strings.IndexFunc(s, unsafeRune) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == unicode.ReplacementChar:
			b.WriteString(`\ufffd`)
		case !unsafeRune(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == unicode.ReplacementChar
}
