package incident

import (
	"context"
	"fmt"
	"strings"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
)

// MaxNoteLen bounds an operator note, in bytes.
const MaxNoteLen = 10000

// NoteStore stores operator notes; *store.Store implements it.
type NoteStore interface {
	AddIncidentNote(ctx context.Context, n cbdash.IncidentNote) (cbdash.IncidentNote, error)
}

// Notes adds operator notes to incidents, stamped by its clock. It is
// safe for concurrent use.
type Notes struct {
	store NoteStore
	clk   clock.Clock
}

// NewNotes returns Notes over store; clk stamps the notes (nil =
// clock.System()).
func NewNotes(store NoteStore, clk clock.Clock) *Notes {
	return &Notes{store: store, clk: clock.OrSystem(clk)}
}

// AddNote validates text (trimmed, 1..MaxNoteLen bytes) and stores it as
// a note on incident id by actor (its Name is the note's author). Errors
// wrap cbdash.ErrInvalid (a zero actor, empty or too long text, a control
// character other than a line break or tab) or
// cbdash.ErrNotFound (no such incident).
func (n *Notes) AddNote(ctx context.Context, actor cbdash.Actor, id int64, text string) (cbdash.IncidentNote, error) {
	text = strings.TrimSpace(text)
	if text == "" || len(text) > MaxNoteLen {
		return cbdash.IncidentNote{}, fmt.Errorf("note text must be 1..%d bytes: %w", MaxNoteLen, cbdash.ErrInvalid)
	}
	if actor.IsZero() {
		return cbdash.IncidentNote{}, fmt.Errorf("a note needs its author: %w", cbdash.ErrInvalid)
	}
	if err := cbdash.CheckText("note text", text, true); err != nil {
		return cbdash.IncidentNote{}, err
	}
	return n.store.AddIncidentNote(ctx, cbdash.IncidentNote{IncidentID: id, At: n.clk.Now(), Author: actor.Name, Text: text})
}
