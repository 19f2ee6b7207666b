package web_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbdash/cbdash/internal/web"
)

// tsDir holds the TypeScript client's packages (openapi-typescript and
// typescript, npm ci; .ci/run does it) and client.ts.
const tsDir = "testdata/typescript"

// TestGeneratedTypeScriptClientNeedsNoCasts generates TypeScript types
// from the served OpenAPI document with openapi-typescript, as issue
// 30's reporter did, and compiles testdata/typescript/client.ts against
// them with tsc --strict: it reads per_instance from GET
// /api/v1/breakers, a hold's id from POST /api/v1/holds and the JSON
// drill report without a cast, which fails to compile on a document with
// two success shapes for one operation (1.0.0's: a HoldPlan or a
// HoldRecord, summaries or dependencies). Without node or the packages
// it is skipped, except in CI (CI set), where it fails.
func TestGeneratedTypeScriptClientNeedsNoCasts(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not installed"
	default:
		if _, err := os.Stat(filepath.Join(tsDir, "node_modules", "openapi-typescript")); err != nil {
			missing = "its npm packages are not installed (run `npm ci` in internal/web/testdata/typescript)"
		}
	}
	if missing != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("the TypeScript client cannot be generated in CI: %s", missing)
		}
		t.Skipf("skipping the generated TypeScript client: %s", missing)
	}
	mods, err := filepath.Abs(filepath.Join(tsDir, "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	client, err := os.ReadFile(filepath.Join(tsDir, "client.ts"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"openapi.json": web.OpenAPI, "client.ts": client} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound against a hang
	defer cancel()
	run := func(script string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, node, append([]string{filepath.Join(mods, script)}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", filepath.Base(script), args, err, out)
		}
	}
	run("openapi-typescript/bin/cli.js", "openapi.json", "-o", "api.d.ts")
	run("typescript/bin/tsc", "--strict", "--noEmit", "--target", "es2020", "--module", "nodenext", "--moduleResolution", "nodenext", "client.ts")
}
