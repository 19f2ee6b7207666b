package web

import (
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
)

func TestDeviceCookieIsBoundToUserKeyAndTime(t *testing.T) {
	t.Parallel()
	now := clocktest.Epoch()
	hash := []byte("$2a$10$otto's bcrypt hash")
	v := deviceValue("Otto", hash, now.Add(-time.Hour))
	if deviceKey(v, "otto", hash, now) == "" {
		t.Fatal("a fresh device cookie of otto is not accepted for otto")
	}
	for name, c := range map[string]struct {
		value, user string
		hash        []byte
		now         time.Time
	}{
		"another user":                    {v, "vera", hash, now},
		"another key (a new password)":    {v, "otto", []byte("$2a$10$otto's new hash"), now},
		"past its lifetime":               {v, "otto", hash, now.Add(deviceTTL)},
		"issued in the future":            {deviceValue("otto", hash, now.Add(time.Hour)), "otto", hash, now},
		"no MAC":                          {v[:len(v)-10], "otto", hash, now},
		"empty":                           {"", "otto", hash, now},
		"a user without a hash":           {v, "otto", nil, now},
		"garbage":                         {"a.b.c", "otto", hash, now},
		"issued-at changed under the MAC": {deviceValue("otto", hash, now.Add(-deviceTTL-time.Hour))[:20] + v[20:], "otto", hash, now},
	} {
		if deviceKey(c.value, c.user, c.hash, c.now) != "" {
			t.Errorf("%s: accepted", name)
		}
	}
}
