package incident

import (
	"testing"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// A quorum advisory's transitions say so, with the rule and the figures
// or why it ended.
func TestAQuorumCauseSaysItIsTheQuorums(t *testing.T) {
	for _, c := range []struct {
		cause protocol.Cause
		want  string
	}{
		{protocol.Cause{Kind: protocol.CauseQuorum, Action: protocol.ActionForceOpen, Actor: cbdash.QuorumActor, Reason: "quorum: 3 of 6"},
			"quorum advisory open: quorum: 3 of 6"},
		{protocol.Cause{Kind: protocol.CauseQuorum, Action: protocol.ActionRelease, Actor: cbdash.QuorumActor, Reason: "quorum's first close: checkout/i0 closed again"},
			"quorum advisory ended: quorum's first close: checkout/i0 closed again"},
	} {
		if got := CauseText(c.cause); got != c.want {
			t.Errorf("CauseText = %q, want %q", got, c.want)
		}
	}
}
