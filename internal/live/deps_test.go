package live_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLiveStandsAlone: live state knows nothing of how batches arrive
// or are stored, nor of HTTP: it depends on neither the ingest, the
// collector that wires it, the store, nor net/http (go list -deps).
func TestLiveStandsAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/cbdash/cbdash/internal/live").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for dep := range strings.SplitSeq(string(out), "\n") {
		switch dep {
		case "github.com/cbdash/cbdash/internal/ingest", "github.com/cbdash/cbdash/internal/collector",
			"github.com/cbdash/cbdash/internal/store", "net/http":
			t.Errorf("internal/live depends on %s", dep)
		}
	}
}
