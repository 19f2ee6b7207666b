package collector

import (
	"errors"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		kind    string // "hello", "batch" or "" for an error
		seq     uint64
		problem string
	}{
		{"batch, type first", `{"type":"batch","seq":3}`, "batch", 3, ""},
		{"batch, type last", ` {"seq":4,"type":"batch"}`, "batch", 4, ""},
		{"hello", `{"type":"hello","protocol":1,"service":"s"}`, "hello", 0, ""},
		{"unknown fields are ignored", `{"type":"batch","seq":5,"future":[1,2]}`, "batch", 5, ""},
		{"a repeated type: the last one counts", `{"type":"batch","seq":1,"type":"hello"}`, "hello", 0, ""},
		{"bad field keeps the seq", `{"type":"batch","seq":6,"windows":{}}`, "", 6, "windows"},
		{"trailing data", `{"type":"batch","seq":7} {}`, "", 0, "after top-level value"},
		{"type not a string", `{"type":1}`, "", 0, "must be a string"},
		{"no type", `{"seq":1}`, "", 0, "type field is missing"},
		{"unknown type", `{"type":"gossip"}`, "", 0, "unknown message type"},
		{"not an object", `[1]`, "", 0, "got JSON array"},
		{"too big", `{"type":"batch","x":"` + strings.Repeat("x", 1<<20) + `"}`, "", 0, "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, seq, err := decode([]byte(tt.in))
			if tt.kind == "" {
				if !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), tt.problem) || seq != tt.seq {
					t.Fatalf("decode = seq %d, %v; want errMalformed with %q and seq %d", seq, err, tt.problem, tt.seq)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := map[bool]string{true: "hello", false: "batch"}[m.Hello != nil]; got != tt.kind || seq != tt.seq {
				t.Fatalf("decoded a %s with seq %d, want a %s with seq %d", got, seq, tt.kind, tt.seq)
			}
		})
	}
}
