package main

import (
	"net/url"
	"os"
	"strings"
	"testing"
)

// A keyword/value PostgreSQL DSN given to --db is PostgreSQL, not the
// name of a SQLite file to make: a start that cannot use it fails, and
// neither its error nor the log (at debug) shows the password, whatever
// its quoting.
func TestServeWithABadKeywordValueDSNShowsNoPassword(t *testing.T) {
	type start struct {
		name, db string
		code     int
		want     string // in stderr
		secrets  []string
	}
	starts := []start{
		{"unreachable", "host=127.0.0.1 port=1 user=cbdash password='hunter2 x' dbname=cbdash sslmode=disable connect_timeout=2", 1,
			"cannot reach PostgreSQL", []string{"hunter2"}},
		{"does not parse", `host=127.0.0.1 port=notaport user=cbdash password = 'sec\' ret' dbname=cbdash`, 2,
			"does not parse", []string{"sec\\", "ret'"}},
		{"an unclosed quote", `host=127.0.0.1 user=cbdash password='open sesame dbname=cbdash`, 2,
			"does not parse", []string{"open", "sesame"}},
	}
	if pg := os.Getenv("CBDASH_TEST_POSTGRES"); pg != "" {
		u, err := url.Parse(pg)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, start{"a wrong password", "host=" + u.Hostname() + " port=" + u.Port() + " user=" + u.User.Username() +
			" password='wr0ng pass' dbname=" + strings.Trim(u.Path, "/") + " sslmode=disable", 1, "cannot reach PostgreSQL", []string{"wr0ng"}})
	}
	for _, s := range starts {
		t.Run(s.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir) // a SQLite file named after the DSN would be made here
			code, stdout, stderr := cli(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", s.db, "--log-level", "debug")
			if code != s.code || !strings.Contains(stderr, s.want) || !(strings.Contains(stderr, "password=xxxxx") || strings.Contains(stderr, "password = xxxxx") ||
				strings.Contains(stderr, "the rest does not parse and is masked")) {
				t.Errorf("exit %d, stderr %q: want exit %d saying %q with the password masked", code, stderr, s.code, s.want)
			}
			for _, secret := range s.secrets {
				if strings.Contains(stderr, secret) || strings.Contains(stdout, secret) {
					t.Errorf("the output shows the password (%q):\n%s\n%s", secret, stdout, stderr)
				}
			}
			if files, _ := os.ReadDir(dir); len(files) != 0 {
				t.Errorf("serve made %v: it took the DSN for a SQLite file", files)
			}
		})
	}
}
