package holds

import "testing"

// The security regression suite (issue 13, item 10): agent-supplied text
// in the hold report's Markdown cannot make a link or break out of its
// escaping.
func TestHoldReportMarkdownEscapesBackslashesAndLinks(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`\[click](https://evil.example)`: `\\\[click\](https://evil.example)`,
		`a\|b`:                           `a\\\|b`,
		`<img src=x>`:                    `&lt;img src=x&gt;`,
	} {
		if got := mdText(in); got != want {
			t.Errorf("mdText(%q) = %q, want %q", in, got, want)
		}
	}
}
