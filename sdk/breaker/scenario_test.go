package breaker_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var scenariosDir = flag.String("scenarios", "testdata/scenarios", "folder of scenario *.json files to replay (absolute, or relative to sdk/breaker)")

// TestScenarios replays every scenario file of -scenarios and prints one
// PASS or FAIL line per file.
func TestScenarios(t *testing.T) {
	failed, err := replayDir(*scenariosDir, os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if failed > 0 {
		t.Fatalf("%d scenario file(s) failed", failed)
	}
}

// TestExtraScenarios replays the project's own scenarios, written in the
// same format, for rules the shared files do not reach: scenarios-extra
// (bulkhead and probe slots, repeated force commands, slow probes with
// backoff, timeouts and the bulkhead, the ramp after a recovery: its
// edges, in ramp-*.json) and adversarial (written from
// FORMAT.md alone as an independent oracle; see its README).
func TestExtraScenarios(t *testing.T) {
	for _, dir := range []string{"testdata/scenarios-extra", "testdata/adversarial"} {
		t.Run(dir, func(t *testing.T) {
			var out strings.Builder
			failed, err := replayDir(dir, &out)
			t.Log("\n" + out.String())
			if err != nil || failed > 0 {
				t.Fatalf("%d failed, %v:\n%s", failed, err, out.String())
			}
		})
	}
}

// TestReplayerFailsBadScenarios checks that the replayer reports a wrong
// or malformed file as a FAIL line with the step and what differed,
// instead of passing or skipping it.
func TestReplayerFailsBadScenarios(t *testing.T) {
	const head = `{"name":"x","about":"y","config":{"window":{"kind":"count","size":4},"minimum_calls":4,"open_duration_ms":1000},"steps":[`
	cases := []struct {
		name, steps, want string
	}{
		{"wrong state", `{"at_ms":0,"call":"error","repeat":4},{"at_ms":1,"expect_state":"closed"}`,
			"step 2: at 1 ms: state is open, want closed"},
		{"wrong rejection", `{"at_ms":0,"call":"error","repeat":4},{"at_ms":1,"call":"ok","expect":"rejected:bulkhead"}`,
			"step 2: call 1 of 1 at 1 ms: got rejected:open, want rejected:bulkhead"},
		{"wrong totals", `{"at_ms":0,"call":"ok","repeat":2},{"at_ms":1,"expect_totals":{"admitted":3}}`,
			"step 2: at 1 ms: total admitted is 2, want 3"},
		{"wrong transitions", `{"at_ms":0,"call":"error","repeat":4},{"at_ms":1,"expect_transitions":[]}`,
			"step 2: at 1 ms: transitions are [closed>open], want []"},
		{"wrong window", `{"at_ms":0,"call":"error","repeat":2},{"at_ms":1,"expect_window":{"failures":1}}`,
			"step 2: at 1 ms: window failures is 2, want 1"},
		{"unknown field", `{"at_ms":0,"call":"ok","sleep":3}`, `step 1: unknown field "sleep" in a call step`},
		{"unknown step kind", `{"at_ms":0,"wait":3}`, "step 1: unknown step kind"},
		{"unknown outcome", `{"at_ms":0,"call":"meh"}`, `step 1: unknown outcome "meh"`},
		{"unknown end outcome", `{"at_ms":0,"begin":"a"},{"at_ms":1,"end":"a","outcome":"meh"}`, `step 2: unknown outcome "meh"`},
		{"end never begun", `{"at_ms":0,"end":"a","outcome":"ok"}`, `step 1: end "a": no call of that name was begun`},
		{"window while open", `{"at_ms":0,"call":"error","repeat":4},{"at_ms":1,"expect_window":{"calls":0}}`,
			"step 2: at 1 ms: expect_window while open"},
		{"time goes back", `{"at_ms":10,"expect_state":"closed"},{"at_ms":5,"expect_state":"closed"}`, "step 2: at_ms 5 goes back in time"},
		{"overlapping call", `{"at_ms":0,"call":"ok","duration_ms":10},{"at_ms":5,"call":"ok"}`, "step 2: at_ms 5 starts before the previous call step ended"},
		{"unknown state", `{"at_ms":0,"expect_state":"ajar"}`, `step 1: unknown state "ajar"`},
		{"unknown command", `{"at_ms":0,"command":"explode"}`, `step 1: unknown command "explode"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(head+tc.steps+"]}"), 0o644); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			failed, err := replayDir(dir, &out)
			if err != nil {
				t.Fatal(err)
			}
			if failed != 1 || !strings.HasPrefix(out.String(), "FAIL bad: "+tc.want) {
				t.Errorf("failed=%d, output %q; want a line starting %q", failed, out.String(), "FAIL bad: "+tc.want)
			}
		})
	}
	t.Run("unknown config field", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "cfg.json"), []byte(`{"name":"x","config":{"colour":"red"},"steps":[{"at_ms":0,"expect_state":"closed"}]}`), 0o644)
		var out strings.Builder
		if failed, _ := replayDir(dir, &out); failed != 1 || !strings.Contains(out.String(), `FAIL cfg: config: json: unknown field "colour"`) {
			t.Errorf("output %q", out.String())
		}
	})
	t.Run("good file passes", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "good.json"), []byte(head+`{"at_ms":0,"call":"error","repeat":4},{"at_ms":1,"expect_state":"open"}]}`), 0o644)
		var out strings.Builder
		if failed, err := replayDir(dir, &out); err != nil || failed != 0 || out.String() != "PASS good\n" {
			t.Errorf("failed=%d err=%v output %q", failed, err, out.String())
		}
	})
	t.Run("empty folder is an error", func(t *testing.T) {
		if _, err := replayDir(t.TempDir(), &strings.Builder{}); err == nil {
			t.Error("no error for a folder without scenarios")
		}
	})
}
