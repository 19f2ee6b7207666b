package collector

import (
	"runtime"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/internal/eventually"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// writerGoroutines counts the goroutines writing for a session (or, as
// before the writer ran on demand, waiting to).
func writerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			all := string(buf[:n])
			return strings.Count(all, "(*session).writeSome") + strings.Count(all, "(*session).writeLoop")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestAQuietConnectionHasNoWriterGoroutine: a session's writer runs only
// while something is ready to write: once the welcome and the acks of
// ten connected agents are written, no goroutine waits to write for
// them, and the next batch is acknowledged as before (a writer starts
// for it).
func TestAQuietConnectionHasNoWriterGoroutine(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	started := h.now().UnixMilli()
	var agents []*rawAgent
	for i := range 10 {
		a := dialRaw(t, h, h.token)
		a.hello("i-"+string(rune('a'+i)), started)
		agents = append(agents, a)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		for _, a := range agents {
			a.send(h.batch(seq, 10, 0))
		}
		for _, a := range agents {
			var ack protocol.Ack
			a.expect(protocol.TypeAck, &ack)
			if ack.Seq != seq {
				t.Fatalf("ack %d, want %d", ack.Seq, seq)
			}
		}
		eventually.True(t, "no writer goroutine for ten quiet connections", func() bool { return writerGoroutines() == 0 })
	}
}
