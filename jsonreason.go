package cbdash

import (
	"encoding/json"
	"errors"
	"fmt"
)

// JSONReason turns a JSON decoding error into a reason for the sender
// that names the field ("ttl: expected int64, got JSON bool") and is at
// most about 200 bytes long.
func JSONReason(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "message"
		}
		return fmt.Sprintf("%s: expected %s, got JSON %s", truncate(field, 80), te.Type, te.Value)
	}
	return truncate(err.Error(), 200)
}
