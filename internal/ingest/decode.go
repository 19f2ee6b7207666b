package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/batchjson"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// errMalformed is wrapped by decoding errors: the message is not the JSON
// object its type says. Validation errors wrap protocol.ErrInvalid instead.
var errMalformed = errors.New("malformed message")

// message is one decoded agent-to-collector message: exactly one of Hello
// and Batch is set.
type message struct {
	Hello *protocol.Hello
	Batch *protocol.Batch
}

// Prefixes of the messages agents normally send (Go encodes "type"
// first): such a message is decoded in one pass, without an envelope pass.
var (
	batchPrefix = []byte(`{"type":"batch"`)
	helloPrefix = []byte(`{"type":"hello"`)
)

// decode parses one agent message. It checks size and JSON shape only;
// the caller validates with the protocol's Validate methods, which need the
// connection's hello and the server time. For a batch whose body does not
// decode, it still returns the seq when it can read one, so the refusal can
// name the batch. Unknown fields are ignored (additive protocol changes).
func decode(data []byte) (m message, seq uint64, err error) {
	if len(data) > protocol.MaxMessageBytes {
		return m, 0, fmt.Errorf("%w: %d bytes (at most %d)", errMalformed, len(data), protocol.MaxMessageBytes)
	}
	if err := checkUTF8(data); err != nil {
		return m, 0, err
	}
	if m, seq, ok := decodeUsual(bytes.TrimLeft(data, " \t\r\n")); ok {
		return m, seq, nil
	}
	// Any other field order, or an error: the envelope first.
	return decodeEnvelope(data)
}

// decodeUsual decodes a message that starts as agents normally send it
// (batchPrefix, helloPrefix) in one pass; false when it does not, or
// does not decode so.
func decodeUsual(body []byte) (m message, seq uint64, ok bool) {
	switch {
	case bytes.HasPrefix(body, batchPrefix):
		if b, ok := batchjson.Decode(body); ok && b.Type == protocol.TypeBatch {
			return message{Batch: &b}, b.Seq, true
		}
		var b protocol.Batch
		err := json.Unmarshal(body, &b)
		if err == nil && b.Type == protocol.TypeBatch {
			return message{Batch: &b}, b.Seq, true
		}
	case bytes.HasPrefix(body, helloPrefix):
		var h protocol.Hello
		if err := json.Unmarshal(body, &h); err == nil && h.Type == protocol.TypeHello {
			clipHello(&h)
			return message{Hello: &h}, 0, true
		}
	}
	return m, 0, false
}

// decodeEnvelope decodes a message by its envelope's type, strictly (see
// decode).
func decodeEnvelope(data []byte) (m message, seq uint64, err error) {
	var env protocol.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Field != "type" {
			return m, 0, fmt.Errorf("%w: %s", errMalformed, jsonReason(err))
		}
		return m, 0, fmt.Errorf("%w: the type field must be a string", errMalformed)
	}
	switch env.Type {
	case protocol.TypeHello:
		var h protocol.Hello
		if err := strictUnmarshal(data, &h); err != nil {
			return m, 0, fmt.Errorf("%w: hello: %s", errMalformed, jsonReason(err))
		}
		clipHello(&h)
		m.Hello = &h
	case protocol.TypeBatch:
		var b protocol.Batch
		if err := strictUnmarshal(data, &b); err != nil {
			var s struct {
				Seq uint64 `json:"seq"`
			}
			_ = json.Unmarshal(data, &s)
			return m, s.Seq, fmt.Errorf("%w: batch: %s", errMalformed, jsonReason(err))
		}
		m.Batch = &b
		seq = b.Seq
	case "":
		return m, 0, fmt.Errorf("%w: the type field is missing", errMalformed)
	default:
		return m, 0, fmt.Errorf("%w: unknown message type %q", errMalformed, truncate(env.Type, 40))
	}
	return m, seq, nil
}

// strictUnmarshal decodes exactly one JSON value (no trailing data).
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// jsonReason turns a decoding error into a reason that names the field.
func jsonReason(err error) string { return cbdash.JSONReason(err) }

// Truncate returns s cut to n bytes and "..." when it is longer, for a
// reason that quotes what an agent or operator sent.
func Truncate(s string, n int) string { return truncate(s, n) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// clipHello moves a hello's breaker list into an allocation of its own
// size: encoding/json grows the list by doubling (a list of 20 has room
// for 33, 6 KB instead of 4 KB), and the collector keeps every instance's
// last hello. (Setting the capacity alone would keep the whole array.)
func clipHello(h *protocol.Hello) {
	if cap(h.Breakers) > len(h.Breakers) {
		bs := make([]protocol.BreakerConfig, len(h.Breakers))
		copy(bs, h.Breakers)
		h.Breakers = bs
	}
}

// decodeIngest parses the body of POST /api/v1/ingest.
func decodeIngest(body []byte) (protocol.IngestRequest, error) {
	var req protocol.IngestRequest
	if err := checkUTF8(body); err != nil {
		return req, err
	}
	if err := strictUnmarshal(body, &req); err != nil {
		return req, fmt.Errorf("%w: ingest request: %s", errMalformed, jsonReason(err))
	}
	clipHello(&req.Hello)
	return req, nil
}

// checkUTF8 refuses a message that is not valid UTF-8: decoding would
// replace the bad bytes with U+FFFD silently, and two names could become
// one.
func checkUTF8(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	off := 0
	for off < len(data) {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	return fmt.Errorf("%w: the message is not valid UTF-8 (first bad byte at offset %d)", errMalformed, off)
}
