package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestDecode(t *testing.T) {
	t.Parallel()
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

// A decoded hello keeps no spare room in its breaker list (the collector
// keeps every instance's last hello): the bytes 1,000 kept hellos of 20
// breakers hold are measured, since a list whose capacity was only cut
// would still hold its whole array (33 configurations, 6 KB, for 20).
func TestDecodedHelloListsHaveNoSpareCapacity(t *testing.T) {
	h := protocol.Hello{Type: protocol.TypeHello, Protocol: protocol.Version, Service: "pay", Instance: "pay-1", StartedAt: 1}
	for i := range 20 {
		h.Breakers = append(h.Breakers, protocol.BreakerConfig{Name: fmt.Sprintf("b%d", i), WindowKind: "count", WindowSize: 10})
	}
	data, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	ingest := []byte(`{"hello":` + string(data) + `,"batch":{"type":"batch","seq":1}}`)
	const n = 1000
	for _, tc := range []struct {
		name   string
		decode func() ([]protocol.BreakerConfig, error)
	}{
		{"websocket", func() ([]protocol.BreakerConfig, error) {
			m, _, err := decode(data)
			if err != nil || m.Hello == nil {
				return nil, fmt.Errorf("decode = %v, %v", m, err)
			}
			return m.Hello.Breakers, nil
		}},
		{"ingest", func() ([]protocol.BreakerConfig, error) {
			req, err := decodeIngest(ingest)
			return req.Hello.Breakers, err
		}},
	} {
		kept := make([][]protocol.BreakerConfig, 0, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			b, err := tc.decode()
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != 20 {
				t.Fatalf("%s: %d breakers", tc.name, len(b))
			}
			kept = append(kept, b)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		// 20 configurations are 4,160 bytes (208 each since the shadow
		// configurations' field; 4,864 allocated), their names 320 more;
		// 33 would be 6,864 (7,168 allocated).
		per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
		t.Logf("%s: %d bytes a kept hello", tc.name, per)
		if per > 5500 {
			t.Errorf("%s: a kept hello's breaker list holds %d bytes, want at most 5,500 (20 configurations, no spare room)", tc.name, per)
		}
		runtime.KeepAlive(kept)
	}
}
