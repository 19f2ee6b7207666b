// Package dsn tells what a --db value names and masks its secrets: a
// PostgreSQL connection string, as a URL (postgres://user:pass@host/db)
// or in libpq's keyword/value form (host=db1 user=cbdash password='a b'
// dbname=cbdash), or else a SQLite file. The store and the cluster bus
// decide their backend by IsPostgres, and everything that logs a DSN or
// puts it in an error masks it with Mask.
package dsn

import (
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Masked replaces a secret in a masked DSN.
const Masked = "xxxxx"

// IsPostgres reports whether s names a PostgreSQL database: a URL starting
// with postgres:// or postgresql://, or a keyword/value string (libpq's
// form: keyword = value pairs separated by spaces, a value quoted with
// single quotes when it holds spaces) with one of libpq's connection
// keywords (host, dbname, user, password, port, sslmode...) among the
// pairs before it stops parsing or as the keyword of the pair where it
// stops. Anything else is a SQLite path: to name a
// SQLite file called like a keyword/value pair ("host=a.db"), write it
// with a directory ("./host=a.db").
func IsPostgres(s string) bool {
	l := strings.ToLower(s)
	if strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://") {
		return true
	}
	pairs, rest := keywordValues(s)
	for _, p := range pairs {
		if libpqKeywords[p.key] {
			return true
		}
	}
	// A pair that stops parsing (an unclosed quote) but starts with a
	// keyword of libpq's is a DSN with a typo, not a file to create: pgx
	// then says what is wrong.
	m := pairStart.FindStringSubmatch(s[rest:])
	return m != nil && libpqKeywords[m[1]]
}

// pairStart is the start of a keyword/value pair.
var pairStart = regexp.MustCompile(`^\s*([A-Za-z0-9_]+)\s*=`)

// libpqKeywords are libpq's connection keywords (PostgreSQL 17), which
// pgx reads too.
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true, "passfile": true,
	"require_auth": true, "channel_binding": true, "connect_timeout": true, "client_encoding": true, "options": true,
	"application_name": true, "fallback_application_name": true, "keepalives": true, "keepalives_idle": true,
	"keepalives_interval": true, "keepalives_count": true, "tcp_user_timeout": true, "replication": true,
	"gssencmode": true, "sslmode": true, "sslnegotiation": true, "sslcompression": true, "sslcert": true, "sslkey": true,
	"sslpassword": true, "sslcertmode": true, "sslrootcert": true, "sslcrl": true, "sslcrldir": true, "sslsni": true,
	"requirepeer": true, "ssl_min_protocol_version": true, "ssl_max_protocol_version": true, "krbsrvname": true,
	"gsslib": true, "gssdelegation": true, "service": true, "target_session_attrs": true, "load_balance_hosts": true,
}

// secretKeywords are the keywords (and URL query parameters) whose value
// Mask hides.
var secretKeywords = map[string]bool{"password": true, "sslpassword": true}

// pair is one keyword = value of a keyword/value string: the keyword, and
// where its value starts and ends in the string (quotes included).
type pair struct {
	key        string
	start, end int
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isKeywordByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// keywordValues splits s as libpq reads a keyword/value string. It returns
// the pairs read, and rest: the offset where s stops being one (len(s)
// when all of it is; 0 when not even the first pair is).
func keywordValues(s string) (pairs []pair, rest int) {
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			return pairs, i
		}
		k := i
		for k < len(s) && isKeywordByte(s[k]) {
			k++
		}
		e := k
		for e < len(s) && isSpace(s[e]) {
			e++
		}
		if k == i || e == len(s) || s[e] != '=' {
			return pairs, i
		}
		e++
		for e < len(s) && isSpace(s[e]) {
			e++
		}
		v := e
		if v < len(s) && s[v] == '\'' {
			for v++; v < len(s) && s[v] != '\''; v++ {
				if s[v] == '\\' {
					v++
				}
			}
			if v >= len(s) { // no closing quote
				return pairs, i
			}
			v++
		} else {
			for ; v < len(s) && !isSpace(s[v]); v++ {
				if s[v] == '\\' {
					v++
				}
			}
			v = min(v, len(s))
		}
		pairs = append(pairs, pair{key: s[i:k], start: e, end: v})
		i = v
	}
}

// secretAssignment finds "password =" or "sslpassword =" where a
// keyword/value string could have it (at the start or after a space),
// in any case.
var secretAssignment = regexp.MustCompile(`(?i)(^|\s)(ssl)?password\s*=`)

// Mask returns s fit for a log or an error message: the password of a
// PostgreSQL URL (in its user part, or a password= or sslpassword= query
// parameter) and the value of a password or sslpassword keyword (quoted or
// not, "password='a b'" too) replaced by xxxxx. A keyword/value string
// that stops parsing is cut where it stops when a secret may follow. A
// string without a secret (a SQLite path) is returned as it is.
func Mask(s string) string {
	l := strings.ToLower(s)
	if strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://") {
		return maskURL(s)
	}
	if !secretAssignment.MatchString(s) {
		return s
	}
	pairs, rest := keywordValues(s)
	var b strings.Builder
	at := 0
	for _, p := range pairs {
		if secretKeywords[strings.ToLower(p.key)] {
			b.WriteString(s[at:p.start])
			b.WriteString(Masked)
			at = p.end
		}
	}
	b.WriteString(s[at:rest])
	if rest < len(s) {
		if secretAssignment.MatchString(s[rest:]) || strings.Contains(strings.ToLower(s[rest:]), "password") {
			b.WriteString("(the rest does not parse and is masked)")
		} else {
			b.WriteString(s[rest:])
		}
	}
	return b.String()
}

func maskURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "postgres://(a DSN that does not parse)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), Masked)
	}
	q := u.Query()
	masked := false
	for k := range q {
		if secretKeywords[strings.ToLower(k)] {
			q.Set(k, Masked)
			masked = true
		}
	}
	if masked {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Database returns the database a PostgreSQL DSN names (the URL's path,
// the dbname keyword), "" when it names none or s is not PostgreSQL.
func Database(s string) string {
	l := strings.ToLower(s)
	if strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://") {
		if u, err := url.Parse(s); err == nil {
			return strings.Trim(u.Path, "/")
		}
		return ""
	}
	pairs, _ := keywordValues(s)
	for _, p := range pairs {
		if p.key == "dbname" {
			return unquote(s[p.start:p.end])
		}
	}
	return ""
}

// unquote reads a keyword/value string's value: quotes dropped, backslash
// escapes undone.
func unquote(v string) string {
	v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// MaskError returns err with s masked wherever pgx wrote it: pgx's parse
// errors quote the connection string with its own masking, which misses
// a password with an escaped quote or spaces around "=" (password = x).
// The result's message is err's with every such quotation replaced by
// Mask(s); it does not wrap err (whose message has the secret), and err
// itself is returned when it has nothing to mask. nil stays nil.
func MaskError(s string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// pe says "cannot parse `<ConnString as pgx masks it>`: <why>":
		// the part after the last "`: " is a part of <why>.
		pm := pe.Error()
		why := "the connection string does not parse"
		if i := strings.LastIndex(pm, "`: "); i >= 0 {
			why = pm[i+3:]
		}
		msg = strings.ReplaceAll(msg, pm, "cannot parse `"+Mask(pe.ConnString)+"`: "+why)
	}
	if s != "" {
		msg = strings.ReplaceAll(msg, s, Mask(s))
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}
