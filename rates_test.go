package cbdash_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

func TestTransitionRecordJSONGivesAtInBothForms(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123).UTC()
	b, err := json.Marshal(cbdash.TransitionRecord{ID: 7, Service: "s", Instance: "i", ReceivedAt: at.Add(time.Second),
		Transition: protocol.Transition{Breaker: "b", From: protocol.StateClosed, To: protocol.StateOpen, At: at.UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["at"] != float64(at.UnixMilli()) || m["at_time"] != at.Format(time.RFC3339Nano) || m["id"] != float64(7) || m["breaker"] != "b" || m["received_at"] == nil {
		t.Fatalf("json %s", b)
	}
	var back cbdash.TransitionRecord
	if err := json.Unmarshal(b, &back); err != nil || back.At != at.UnixMilli() || back.ID != 7 || back.Breaker != "b" {
		t.Fatalf("round trip %+v: %v", back, err)
	}
}
