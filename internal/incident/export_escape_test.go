package incident

import "testing"

// The security regression suite (issue 13, item 10): agent-supplied text
// in a Markdown export cannot make a link or break out of its escaping.
func TestMarkdownEscapesBackslashes(t *testing.T) {
	for in, want := range map[string]string{
		`\[click](https://evil.example)`: `\\\[click\](https://evil.example)`,
		`a\|b`:                           `a\\\|b`,
		`\`:                              `\\`,
	} {
		if got := md(in); got != want {
			t.Errorf("md(%q) = %q, want %q", in, got, want)
		}
	}
}
