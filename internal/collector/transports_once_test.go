package collector

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// One agent process sends over its websocket and, meanwhile, over HTTP
// ingest (a fallback, or a second path of the same process): batches
// resent over the other transport are acknowledged and not stored again,
// and every batch counts once in the stored history.
func TestOneAgentProcessOverWebsocketAndHTTPStoresEachBatchOnce(t *testing.T) {
	t.Parallel()
	h := startHarness(t, "", nil)
	a := dialRaw(t, h, h.token)
	a.hello("a1", 1)
	ack := func(want uint64) {
		t.Helper()
		var got protocol.Ack
		a.expect(protocol.TypeAck, &got)
		if got.Seq != want {
			t.Fatalf("websocket ack %d, want %d", got.Seq, want)
		}
	}
	for seq := uint64(1); seq <= 3; seq++ {
		a.send(h.batch(seq, 1<<(seq-1), 0))
		ack(seq)
	}
	url := h.srv.URL + "/api/v1/ingest"
	post := func(seq uint64, admitted int64, want uint64) {
		t.Helper()
		status, body := call(t, "POST", url, h.token, protocol.IngestRequest{Hello: rawHello("a1", 1), Batch: h.batch(seq, admitted, 0)})
		var resp protocol.IngestResponse
		if err := json.Unmarshal(body, &resp); status != 200 || err != nil || resp.AckedSeq != want {
			t.Fatalf("HTTP seq %d: %d %s (%v); want 200 acking %d", seq, status, body, err, want)
		}
	}
	post(2, 2, 3) // a resend of what the websocket stored
	post(4, 8, 4)
	a.send(h.batch(4, 8, 0)) // and the other way round
	ack(4)
	a.send(h.batch(5, 16, 0))
	ack(5)
	post(5, 16, 5)
	if last, err := h.store.LastSeq(t.Context(), "api", "a1", 1); err != nil || last != 5 {
		t.Fatalf("LastSeq = %d, %v; want 5", last, err)
	}
	pts, err := h.store.History(t.Context(), cbdash.HistoryQuery{DependencyKey: cbdash.DependencyKey{Service: "api", Breaker: "db"},
		From: h.now().Add(-time.Hour), To: h.now().Add(time.Hour), Resolution: cbdash.ResolutionSecond})
	if err != nil {
		t.Fatal(err)
	}
	var calls int64
	for _, p := range pts {
		calls += p.Counts.Admitted
	}
	if calls != 31 {
		t.Fatalf("stored history counts %d calls, want 31 (1+2+4+8+16: each batch once)", calls)
	}
}
