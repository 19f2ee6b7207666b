package dsn_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cbdash/cbdash/internal/dsn"
)

func TestIsPostgres(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"postgres://u:p@db:5432/cbdash", true},
		{"POSTGRESQL://db/cbdash", true},
		{"host=db1 dbname=cbdash", true},
		{"  user = cbdash  password = 'a b' ", true},
		{"dbname=cbdash", true},
		{"search_path=x host=db1", true}, // a runtime parameter first
		{"sslmode=disable", true},
		{"host='db1 password=x", true}, // an unclosed quote: a DSN with a typo, which pgx then refuses
		{"./cbdash.db", false},
		{"cbdash.db", false},
		{"/var/lib/cbdash/cbdash.db", false},
		{"file:cbdash.db?mode=rwc", false},
		{":memory:", false},
		{"./host=a.db", false},
		{"a=b.db", false}, // no keyword of libpq's
		{`C:\data\cbdash.db`, false},
		{"", false},
	} {
		if got := dsn.IsPostgres(tc.s); got != tc.want {
			t.Errorf("IsPostgres(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// Mask hides every form of a password a DSN can carry, and leaves the
// rest as it was.
func TestMaskHidesEveryForm(t *testing.T) {
	for _, tc := range []struct{ s, want string }{
		{"postgres://cbdash:s3cret@db:5432/cbdash?sslmode=disable", "postgres://cbdash:xxxxx@db:5432/cbdash?sslmode=disable"},
		{"postgresql://cbdash@db/cbdash?password=s3cret&sslmode=require", "postgresql://cbdash@db/cbdash?password=xxxxx&sslmode=require"},
		{"postgres://db/cbdash?sslpassword=s3cret", "postgres://db/cbdash?sslpassword=xxxxx"},
		{"postgres://db/cbdash", "postgres://db/cbdash"},
		{"host=db password=s3cret dbname=cbdash", "host=db password=xxxxx dbname=cbdash"},
		{"host=db password='s3 cret' dbname=cbdash", "host=db password=xxxxx dbname=cbdash"},
		{`host=db password='s3\' cr\\et' dbname=cbdash`, "host=db password=xxxxx dbname=cbdash"},
		{`host=db password=s3\ cret dbname=cbdash`, "host=db password=xxxxx dbname=cbdash"},
		{"host=db password = s3cret dbname=cbdash", "host=db password = xxxxx dbname=cbdash"},
		{"host=db\tpassword=\ts3cret", "host=db\tpassword=\txxxxx"},
		{"password=s3cret", "password=xxxxx"},
		{"password=", "password=xxxxx"},
		{"host=db sslpassword=s3cret sslkey=/k", "host=db sslpassword=xxxxx sslkey=/k"},
		{"host=db PASSWORD=s3cret", "host=db PASSWORD=xxxxx"},
		{"host=db password='s3 cret", "host=db (the rest does not parse and is masked)"},
		{"host = 'db password=s3cret", "(the rest does not parse and is masked)"},
		{"host=db user=cbdash dbname=cbdash", "host=db user=cbdash dbname=cbdash"},
		{"./cbdash.db", "./cbdash.db"},
		{"/srv/passwords/cbdash.db", "/srv/passwords/cbdash.db"},
	} {
		got := dsn.Mask(tc.s)
		if got != tc.want {
			t.Errorf("Mask(%q) = %q, want %q", tc.s, got, tc.want)
		}
		for _, secret := range []string{"s3cret", "s3 cret", "cr\\et", "s3\\"} {
			if strings.Contains(got, secret) {
				t.Errorf("Mask(%q) = %q still holds %q", tc.s, got, secret)
			}
		}
	}
}

// pgx's parse errors quote the connection string with a masking of their
// own that misses a password with an escaped quote or spaces around "=";
// MaskError puts Mask's in its place.
func TestMaskErrorHidesWhatPgxShows(t *testing.T) {
	for _, s := range []string{
		`host=db password = s3cret port=notaport`,
		`host=db password='s3\' cret' port=notaport`,
		`host=db password='s3 cret' port=notaport`,
		`postgres://cbdash:s3cret@db:notaport/cbdash`,
		`host=db password='s3 cret`,
	} {
		_, err := pgconn.ParseConfig(s)
		if err == nil {
			t.Fatalf("ParseConfig(%q) = nil error", s)
		}
		masked := dsn.MaskError(s, err)
		for _, secret := range []string{"s3cret", "cret"} {
			if strings.Contains(masked.Error(), secret) {
				t.Errorf("MaskError(%q) = %q still holds %q (pgx: %q)", s, masked, secret, err)
			}
		}
		if !strings.Contains(masked.Error(), "cannot parse") {
			t.Errorf("MaskError(%q) = %q lost pgx's reason", s, masked)
		}
	}
	if dsn.MaskError("x", nil) != nil {
		t.Error("MaskError(nil) is not nil")
	}
}

func TestDatabase(t *testing.T) {
	for s, want := range map[string]string{
		"postgres://u:p@db/cbdash?sslmode=disable": "cbdash",
		"host=db dbname='my db' password=x":        "my db",
		"host=db":                                  "",
		"./cbdash.db":                              "",
	} {
		if got := dsn.Database(s); got != want {
			t.Errorf("Database(%q) = %q, want %q", s, got, want)
		}
	}
}
