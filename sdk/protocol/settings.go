package protocol

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Settings are a breaker's settings in its own library's terms, setting
// name to value as text, for breakers fed to the agent by an adapter (see
// BreakerConfig.Library). On the wire they are a JSON object of strings:
//
//	"settings": {"MaxRequests": "1", "Timeout": "30s"}
//
// A Settings is an immutable value that keeps a canonical encoding, so
// that it compares with == (BreakerConfig stays comparable, which
// configuration drift relies on). The zero value holds no settings.
type Settings struct {
	enc string // canonical JSON object, keys sorted; "" when empty
}

// NewSettings returns the settings in m (copied; nil or empty gives the
// zero Settings).
func NewSettings(m map[string]string) Settings {
	if len(m) == 0 {
		return Settings{}
	}
	b, _ := json.Marshal(m) // cannot fail: strings only; keys come out sorted
	return Settings{enc: string(b)}
}

// Map returns a new map of the settings; nil when there are none.
func (s Settings) Map() map[string]string {
	if s.enc == "" {
		return nil
	}
	var m map[string]string
	_ = json.Unmarshal([]byte(s.enc), &m) // made by NewSettings or UnmarshalJSON
	return m
}

// IsZero reports whether s holds no settings.
func (s Settings) IsZero() bool { return s.enc == "" }

// String returns the settings as "name=value" pairs sorted by name and
// separated by ", " ("" when there are none).
func (s Settings) String() string {
	m := s.Map()
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

// MarshalJSON encodes s as a JSON object of strings.
func (s Settings) MarshalJSON() ([]byte, error) {
	if s.enc == "" {
		return []byte("{}"), nil
	}
	return []byte(s.enc), nil
}

// UnmarshalJSON decodes a JSON object of strings (or null).
func (s *Settings) UnmarshalJSON(data []byte) error {
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	*s = NewSettings(m)
	return nil
}

func (s Settings) validate(field string) error {
	m := s.Map()
	if len(m) > MaxSettings {
		return invalid("%s has %d entries (at most %d)", field, len(m), MaxSettings)
	}
	for k, v := range m {
		if err := checkName(field+" key", k); err != nil {
			return err
		}
		if len(v) > MaxNameLen {
			return invalid("%s[%q] is longer than %d bytes", field, k, MaxNameLen)
		}
	}
	return nil
}
