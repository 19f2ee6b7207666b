package collector

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// The ack a session writes by hand is exactly json.Marshal's, which
// agents in other languages were written against (docs/protocol.md).
func TestAckBytesAreJSONMarshals(t *testing.T) {
	s := &session{out: make(chan []byte, 1)}
	for _, seq := range []uint64{0, 1, 42, 1 << 53, math.MaxUint64} {
		s.ack(context.Background(), seq)
		got := <-s.out
		want, err := json.Marshal(protocol.Ack{Type: protocol.TypeAck, Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("ack %d = %s, want %s", seq, got, want)
		}
	}
}
