package ingest

import (
	"encoding/json"
	"github.com/cbdash/cbdash/internal/live"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// FuzzDecode feeds hostile input through what the collector does with an
// agent message: decode, validate, apply to live state, aggregate. None of
// it may panic, whatever the bytes.
func FuzzDecode(f *testing.F) {
	hello := rawHello("a1", 1)
	hb, _ := json.Marshal(hello)
	f.Add(hb)
	t0 := clocktest.Epoch()
	bb, _ := json.Marshal(batchAt(t0, 1, 10, 2, transAt(t0, protocol.StateClosed, protocol.StateOpen, 1)))
	f.Add(bb)
	f.Add([]byte(`{"type":"batch","seq":1,"windows":[{"breaker":"db","start":1,"duration_ms":1000,"state":"closed","latency":[1,2,3]}]}`))
	f.Add([]byte(`{"type":"batch","seq":18446744073709551615,"transitions":[{"breaker":"db","from":"open","to":"forced_open","at":9223372036854775807}]}`))
	f.Add([]byte(`{"type":"hello","protocol":1,"breakers":null}`))
	f.Add([]byte(`{"type":`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		clk := clocktest.Virtual()
		l := live.New(live.Config{Now: clk.Now, StaleAfter: 15 * time.Second, GoneAfter: 10 * time.Minute, SubscriberBuffer: 16})
		l.Hello(&hello, 0, nil, clk.Now(), nil)
		m, _, err := decode(data)
		if err != nil {
			return
		}
		if m.Hello != nil {
			if m.Hello.Validate() == nil {
				l.Hello(m.Hello, 0, nil, clk.Now(), nil)
			}
		} else if m.Batch.Validate(&hello, clk.Now().UnixMilli()) == nil {
			l.Apply(live.Key{Service: "api", Instance: "a1"}, m.Batch, clk.Now())
		}
		l.FlushUrgent()
		l.Dependencies()
		l.Services()
		clk.Advance(time.Hour)
		l.Sweep()
	})
}
