package protocol_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// TestDocumentedExamplesAreValidMessages decodes every JSON example of
// docs/protocol.md into its Go type, refusing unknown fields (so that a
// misspelt field in the document fails), and validates it: someone
// writing an agent from the document alone sends what the collector
// accepts.
func TestDocumentedExamplesAreValidMessages(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) < 8 {
		t.Fatalf("found %d JSON examples, want every message", len(blocks))
	}
	seen := map[string]bool{}
	var hello *protocol.Hello
	for _, m := range blocks {
		data := dedent(m[1])
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(data, &probe); err != nil {
			t.Fatalf("example is not JSON: %v\n%s", err, data)
		}
		var typ string
		_ = json.Unmarshal(probe["type"], &typ)
		switch {
		case typ == protocol.TypeHello:
			var h protocol.Hello
			strict(t, data, &h)
			check(t, data, h.Validate())
			hello = &h
		case typ == protocol.TypeBatch:
			var b protocol.Batch
			strict(t, data, &b)
			check(t, data, b.Validate(hello, 0))
		case typ == protocol.TypeCommand:
			var c protocol.Command
			strict(t, data, &c)
			check(t, data, c.Validate())
		case typ == protocol.TypeWelcome:
			strict(t, data, &protocol.Welcome{})
		case typ == protocol.TypeAck:
			strict(t, data, &protocol.Ack{})
		case typ == protocol.TypeError:
			strict(t, data, &protocol.Error{})
		case probe["hello"] != nil:
			typ = "ingest request"
			var r protocol.IngestRequest
			strict(t, data, &r)
			check(t, data, r.Hello.Validate())
			check(t, data, r.Batch.Validate(&r.Hello, 0))
		case probe["acked_seq"] != nil:
			typ = "ingest response"
			var r protocol.IngestResponse
			strict(t, data, &r)
			for _, c := range r.Commands {
				check(t, data, c.Validate())
			}
		default:
			t.Fatalf("example of no known message:\n%s", data)
		}
		seen[typ] = true
	}
	for _, typ := range []string{"hello", "welcome", "batch", "ack", "error", "command", "ingest request", "ingest response"} {
		if !seen[typ] {
			t.Errorf("docs/protocol.md has no example of %s", typ)
		}
	}
}

// dedent removes the indentation of an example nested in a list.
func dedent(b []byte) []byte {
	lines := strings.Split(string(b), "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for i, l := range lines {
		if len(l) >= indent {
			lines[i] = l[indent:]
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

func strict(t *testing.T, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("example does not decode into %T: %v\n%s", v, err, data)
	}
}

func check(t *testing.T, data []byte, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("example is invalid: %v\n%s", err, data)
	}
}
