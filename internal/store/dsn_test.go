package store_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
)

// keywordValue writes the PostgreSQL URL u in libpq's keyword/value form,
// every value quoted (a quote or backslash escaped), its query parameters
// as keywords too.
func keywordValue(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := func(v string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'" }
	pw, _ := p.User.Password()
	parts := []string{"host=" + q(p.Hostname()), "port = " + p.Port(), "user=" + q(p.User.Username()),
		"password=" + q(pw), "dbname=" + strings.Trim(p.Path, "/")}
	for k, vs := range p.Query() {
		parts = append(parts, k+"="+q(vs[0]))
	}
	return strings.Join(parts, " ")
}

// A keyword/value DSN (host=... password=... dbname=...) opens the
// PostgreSQL database it names, the one its URL form names: not a SQLite
// file called "host=...". Errors and logs show it with its password
// masked.
func TestAKeywordValueDSNOpensPostgreSQL(t *testing.T) {
	dsn := storetest.Path(t)
	if !store.IsPostgres(dsn) {
		t.Skip("PostgreSQL only: the keyword/value form names a PostgreSQL database")
	}
	kv := keywordValue(t, dsn)
	if !store.IsPostgres(kv) {
		t.Fatalf("IsPostgres(%s) = false", store.MaskDSN(kv))
	}
	dir := t.TempDir()
	t.Chdir(dir) // a SQLite file named after the DSN would be made here
	byKV := storetest.OpenFile(t, kv, store.Options{})
	ctx := context.Background()
	if err := byKV.SaveHello(ctx, hello("pay", "pay-1", 1, "db"), t0); err != nil {
		t.Fatal(err)
	}
	byURL := storetest.OpenFile(t, dsn, store.Options{})
	got, err := byURL.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Service != "pay" || got[0].Instance != "pay-1" {
		t.Errorf("the URL form reads %+v, want the instance saved through the keyword/value form", got)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Errorf("opening %s made files %v: it was taken as a SQLite path", store.MaskDSN(kv), files)
	}
	p, _ := url.Parse(dsn)
	pw, _ := p.User.Password()
	if m := store.MaskDSN(kv); strings.Contains(m, "password='"+pw+"'") || !strings.Contains(m, "password=xxxxx") {
		t.Errorf("MaskDSN(the keyword/value DSN) = %q", m)
	}

	// A bad one: its error masks the password, even one that pgx's own
	// masking misses (an escaped quote, spaces around =).
	for _, bad := range []string{
		kv + " port=notaport",
		strings.Replace(kv, "password=", `password = 'sec\' ret' sslpassword=`, 1) + " port=notaport",
		strings.Replace(kv, "host=", "connect_timeout=1 host=", 1) + " password=hunter2 port=1",
	} {
		_, err := store.Open(ctx, bad, store.Options{})
		if err == nil {
			t.Fatalf("Open(%s) = nil error", store.MaskDSN(bad))
		}
		for _, secret := range []string{"sec", "ret", "hunter2", "password='" + pw + "'"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Open's error shows the password (%q): %v", secret, err)
			}
		}
		if err := store.CheckDSN(bad); err != nil && (strings.Contains(err.Error(), "sec") || strings.Contains(err.Error(), "hunter2")) {
			t.Errorf("CheckDSN's error shows the password: %v", err)
		}
	}
}
