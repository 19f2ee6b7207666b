package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// deviceCookie is the login limiter's device cookie: set by a successful
// login, sent back only to /login, it marks a client that has proven it
// knows a user's password, so its attempts for that user are limited per
// device and not by the user's shared bucket (see loginLimiter).
const deviceCookie = "cbdash_device"

// deviceTTL bounds a device cookie's lifetime; each successful login
// issues a new one.
const deviceTTL = 30 * 24 * time.Hour

// deviceValue is a device cookie for user issued at at:
// base64url(user) "." unix seconds "." base64url(HMAC-SHA256). The HMAC
// key is derived from the user's bcrypt hash, a secret only the server
// holds: cookies survive a restart, need no key of their own in the
// store, and all of a user's device cookies die with a password change.
func deviceValue(user string, hash []byte, at time.Time) string {
	body := base64.RawURLEncoding.EncodeToString([]byte(strings.ToLower(user))) + "." + strconv.FormatInt(at.Unix(), 10)
	return body + "." + base64.RawURLEncoding.EncodeToString(deviceMAC(hash, body))
}

func deviceMAC(hash []byte, body string) []byte {
	key := sha256.Sum256(append([]byte("cbdash device cookie\x00"), hash...))
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte(body))
	return m.Sum(nil)
}

// deviceKey checks a device cookie's value for user (whose bcrypt hash
// is hash) at now and returns the limiter key of the device, or "" when
// the cookie is forged, expired, issued in the future or another user's.
func deviceKey(value, user string, hash []byte, now time.Time) string {
	if value == "" || len(hash) == 0 {
		return ""
	}
	i := strings.LastIndexByte(value, '.')
	if i < 0 {
		return ""
	}
	body, sig := value[:i], value[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, deviceMAC(hash, body)) {
		return ""
	}
	name, secs, ok := strings.Cut(body, ".")
	if !ok {
		return ""
	}
	n, err := base64.RawURLEncoding.DecodeString(name)
	if err != nil || string(n) != strings.ToLower(user) {
		return ""
	}
	unix, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return ""
	}
	at := time.Unix(unix, 0)
	if at.After(now.Add(time.Minute)) || now.Sub(at) > deviceTTL {
		return ""
	}
	return body
}

// setDevice gives the client a new device cookie for user.
func (s *Server) setDevice(w http.ResponseWriter, user string, hash []byte) {
	http.SetCookie(w, &http.Cookie{
		Name: deviceCookie, Value: deviceValue(user, hash, s.now()), Path: "/login",
		HttpOnly: true, Secure: s.cfg.Secure, SameSite: http.SameSiteStrictMode, MaxAge: int(deviceTTL / time.Second),
	})
}
