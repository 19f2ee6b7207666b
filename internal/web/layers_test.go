package web_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyWebServesHTTP keeps the HTTP framework in the web layer: the
// domain packages offer plain Go methods (and plain net/http handlers for
// the agents' transports), and internal/web mounts every route.
func TestOnlyWebServesHTTP(t *testing.T) {
	t.Parallel()
	domain := []string{
		"github.com/cbdash/cbdash",
		"github.com/cbdash/cbdash/internal/collector",
		"github.com/cbdash/cbdash/internal/live",
		"github.com/cbdash/cbdash/internal/ingest",
		"github.com/cbdash/cbdash/internal/incident",
		"github.com/cbdash/cbdash/internal/alert",
		"github.com/cbdash/cbdash/internal/store",
		"github.com/cbdash/cbdash/internal/source",
		"github.com/cbdash/cbdash/internal/demo",
		"github.com/cbdash/cbdash/internal/loadgen",
	}
	for _, pkg := range domain {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
			}
			for dep := range strings.SplitSeq(string(out), "\n") {
				if strings.HasPrefix(dep, "github.com/labstack/echo") {
					t.Errorf("%s depends on %s: routes belong in internal/web", pkg, dep)
				}
			}
		})
	}
}
