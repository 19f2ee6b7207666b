package protocol

import (
	"encoding/json"
	"fmt"
)

// MaxShadows bounds BreakerConfig.Shadows: the shadow configurations of
// one breaker (sdk/breaker.MaxShadows).
const MaxShadows = 3

// Shadows are a breaker's shadow configurations (BreakerConfig.Shadows),
// each a BreakerConfig whose Name is the shadow's name and whose Library,
// Settings and Shadows are empty. On the wire they are a JSON array:
//
//	"shadows": [{"name": "tight", "window_kind": "count", "window_size": 100, "failure_rate_threshold": 20, ...}]
//
// A Shadows is an immutable value that keeps its encoding, so that it
// compares with == (BreakerConfig stays comparable, which configuration
// drift relies on). The zero value holds none.
type Shadows struct {
	enc string // JSON array; "" when empty
}

// NewShadows returns the shadow configurations in list (copied; nil or
// empty gives the zero Shadows).
func NewShadows(list []BreakerConfig) Shadows {
	if len(list) == 0 {
		return Shadows{}
	}
	b, _ := json.Marshal(list) // plain structs of numbers and strings cannot fail
	return Shadows{enc: string(b)}
}

// List returns a new slice of the shadow configurations; nil when there
// are none.
func (s Shadows) List() []BreakerConfig {
	if s.enc == "" {
		return nil
	}
	var l []BreakerConfig
	_ = json.Unmarshal([]byte(s.enc), &l) // made by NewShadows or UnmarshalJSON
	return l
}

// IsZero reports whether s holds no shadow configuration.
func (s Shadows) IsZero() bool { return s.enc == "" }

// MarshalJSON encodes s as a JSON array of breaker configurations.
func (s Shadows) MarshalJSON() ([]byte, error) {
	if s.enc == "" {
		return []byte("[]"), nil
	}
	return []byte(s.enc), nil
}

// UnmarshalJSON decodes a JSON array of breaker configurations (or null).
func (s *Shadows) UnmarshalJSON(data []byte) error {
	var l []BreakerConfig
	if err := json.Unmarshal(data, &l); err != nil {
		return fmt.Errorf("shadows: %w", err)
	}
	*s = NewShadows(l)
	return nil
}

func (s Shadows) validate(field string) error {
	l := s.List()
	if len(l) > MaxShadows {
		return invalid("%s has %d entries (at most %d)", field, len(l), MaxShadows)
	}
	for i := range l {
		c := &l[i]
		p := fmt.Sprintf("%s[%d]", field, i)
		if err := checkName(p+".name", c.Name); err != nil {
			return err
		}
		for _, o := range l[:i] {
			if o.Name == c.Name {
				return invalid("%s.name %q is used twice", p, c.Name)
			}
		}
		if c.Library != "" || !c.Settings.IsZero() || !c.Shadows.IsZero() {
			return invalid("%s: a shadow has no library, settings or shadows of its own", p)
		}
		if err := c.validate(p); err != nil {
			return err
		}
	}
	return nil
}
