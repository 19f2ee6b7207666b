package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestTheREADMEsEnvironmentVariablesWork: every flag the README's table
// gives an environment variable is read from it, by that name (the
// limits' variables were listed but not read).
func TestTheREADMEsEnvironmentVariablesWork(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `(CBDASH_[A-Z_]+)`").FindAllSubmatch(readme, -1)
	if len(rows) < 20 {
		t.Fatalf("found %d rows of flags with variables in README.md; did the table's form change?", len(rows))
	}
	// `cbdash --help` lists them all, and says where history is kept.
	code, help, _ := cli(t, nil, "--help")
	if code != 0 || !strings.Contains(help, "PostgreSQL") || strings.Contains(help, "one SQLite file") {
		t.Errorf("cbdash --help: exit %d, does not name both stores:\n%s", code, help)
	}
	for _, r := range rows {
		flag, env := string(r[1]), string(r[2])
		if !regexp.MustCompile(`(?m)(^|\s)--` + regexp.QuoteMeta(flag) + `[,.]`).MatchString(help) {
			t.Errorf("cbdash --help does not list --%s among the flags set from the environment", flag)
		}
		if !fromEnv(flag) {
			t.Errorf("README.md: --%s is set by %s, but the variable is not read", flag, env)
		}
		if got := envName(flag); got != env {
			t.Errorf("README.md names %s for --%s; it is read as %s", env, flag, got)
		}
	}
}

// TestTheREADMEsAlertsAndIncidentsCommandsParse: every command of the
// README's "Alerts and incidents" block is one cbdash has, with flags it
// takes (each is run with --help: parsed, nothing sent).
func TestTheREADMEsAlertsAndIncidentsCommandsParse(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "### Alerts and incidents\n")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README.md has no "### Alerts and incidents" section with a sh block`)
	}
	block = strings.ReplaceAll(block, "\\\n", " ")
	n := 0
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, " #")
		line, _, _ = strings.Cut(line, " >")
		args := shellWords(strings.TrimSpace(line))
		if len(args) == 0 {
			continue
		}
		if args[0] != "cbdash" {
			t.Errorf("README.md: %q is not a cbdash command", line)
			continue
		}
		n++
		if code, _, stderr := cli(t, nil, append(args[1:], "--help")...); code != 0 {
			t.Errorf("README.md: %q: exit %d, %s", line, code, stderr)
		}
	}
	if n < 5 {
		t.Errorf("found %d commands in the README's alerts block", n)
	}
}

// shellWords splits s on spaces, keeping "double-quoted" words whole.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}
