package cbdash

import (
	"fmt"
	"strings"
	"unicode"
)

// CheckText refuses free text that a person typed (a hold's or a
// command's reason, an incident note) when it holds a C0 or C1 control
// character, which would be interpreted by the terminal that prints it
// (ESC starts every ANSI sequence, U+009B is a one-byte CSI); multiline
// allows line breaks and tabs. The error wraps ErrInvalid and names
// field and the first such character.
func CheckText(field, s string, multiline bool) error {
	i := strings.IndexFunc(s, func(r rune) bool {
		return unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\r' || r == '\t'))
	})
	if i < 0 {
		return nil
	}
	r := []rune(s[i:])[0]
	return fmt.Errorf("%w: %s contains the control character U+%04X at byte %d: only printable text", ErrInvalid, field, r, i)
}
