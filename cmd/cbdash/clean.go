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

// cleanText is clean for a multi-line text (a Markdown report): line
// breaks and tabs stay, every other unsafe rune is escaped.
func cleanText(s string) string {
	return escapeUnsafe(s, "\n\t", func(b *strings.Builder, r rune) {
		if r < 0x100 && r != unicode.ReplacementChar {
			fmt.Fprintf(b, `\x%02x`, r)
		} else {
			fmt.Fprintf(b, `\u%04x`, r)
		}
	})
}

// cleanJSON is clean for a JSON document: unsafe runes (which can only
// be in its strings; line breaks and tabs between tokens stay) become
// \uXXXX escapes, so the output is still the same JSON.
func cleanJSON(s string) string {
	return escapeUnsafe(s, "\n\t", func(b *strings.Builder, r rune) { fmt.Fprintf(b, `\u%04x`, r) })
}

func escapeUnsafe(s, keep string, esc func(*strings.Builder, rune)) string {
	unsafe := func(r rune) bool { return unsafeRune(r) && !strings.ContainsRune(keep, r) }
	if strings.IndexFunc(s, unsafe) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafe(r) {
			esc(&b, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdUnescaper undoes the escapes of the server's Markdown reports
// (internal/holds and internal/incident escape \ [ ] < > | * _ and `):
// in a terminal they are noise ("48.6 % &gt; 20 %", "force open
// \*/inventory"). Apply clean after it, never before.
var mdUnescaper = strings.NewReplacer(`\\`, `\`, `\[`, "[", `\]`, "]", "&lt;", "<", "&gt;", ">", `\|`, "|", `\*`, "*", `\_`, "_", "\\`", "`")

// markdownForTerminal is a Markdown report as a terminal shows it best:
// the text without its escapes.
func markdownForTerminal(md string) string { return mdUnescaper.Replace(md) }
