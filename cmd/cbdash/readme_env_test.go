package main

import (
	"os"
	"regexp"
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
	for _, r := range rows {
		flag, env := string(r[1]), string(r[2])
		if !fromEnv(flag) {
			t.Errorf("README.md: --%s is set by %s, but the variable is not read", flag, env)
		}
		if got := envName(flag); got != env {
			t.Errorf("README.md names %s for --%s; it is read as %s", env, flag, got)
		}
	}
}
