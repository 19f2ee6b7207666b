package agent

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// FuzzCollectorMessage feeds arbitrary frames from the collector to the
// agent's message handling, with commands applied to a real breaker. It
// must never panic, never end the connection for anything but a fatal
// error, and whatever it queues must form a valid batch.
func FuzzCollectorMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"command","id":"c1","breaker":"payments","action":"force_open","ttl_ms":60000,"reason":"r","actor":"a"}`,
		`{"type":"command","id":"c2","breaker":"payments","action":"reset","expires_at":1}`,
		`{"type":"command","id":"c3","breaker":"ledger","action":"release"}`,
		`{"type":"command","id":"c4","breaker":"payments","action":"force_closed","ttl_ms":9223372036854775807}`,
		`{"type":"command","id":"c5","breaker":"payments","action":"force_open","ttl_ms":"x"}`,
		`{"type":"ack","seq":3}`,
		`{"type":"error","seq":2,"reason":"no"}`,
		`{"type":"error","reason":"bye","fatal":true}`,
		`{"type":"welcome","last_seq":1}`,
		`{"type":"teleport"}`,
		`{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := breaker.New("payments", breaker.Config{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(Config{URL: "ws://127.0.0.1:1/api/v1/agent", Service: "s", BufferBytes: minBufferBytes})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Register(b); err != nil {
			t.Fatal(err)
		}
		defer a.Close(context.Background())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { // stands in for the report goroutine
			defer close(done)
			seen := newCommandLog(commandLogSize)
			for {
				select {
				case c := <-a.cmds:
					a.command(c, seen)
				case <-ctx.Done():
					return
				}
			}
		}()
		err = a.handle(ctx, data)
		cancel()
		<-done
		var e protocol.Error
		if err != nil && (json.Unmarshal(data, &e) != nil || !e.Fatal) {
			t.Fatalf("a non-fatal message ended the connection: %v", err)
		}
		a.queue()
		for {
			_, batch, ok, _ := a.out.next(1, ^uint64(0))
			if !ok {
				break
			}
			var got protocol.Batch
			if err := json.Unmarshal(batch, &got); err != nil {
				t.Fatal(err)
			}
			hello, _ := a.hello()
			if err := got.Validate(&hello, 0); err != nil {
				t.Fatalf("the agent formed an invalid batch: %v\n%s", err, batch)
			}
		}
	})
}
