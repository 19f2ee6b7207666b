package agent_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOnlyTheStandardLibraryAndWebsocket keeps the agent light for
// the services that import it: besides the standard library it may only
// use the SDK's own packages and github.com/coder/websocket.
func TestImportsOnlyTheStandardLibraryAndWebsocket(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(p, "github.com/cbdash/cbdash/sdk/"),
			strings.HasPrefix(p, "github.com/coder/websocket"):
		default:
			t.Errorf("sdk/agent depends on %s", p)
		}
	}
}
