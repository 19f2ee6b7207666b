package incident

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cbdash/cbdash/internal/wording"
)

// Markdown renders the report as a postmortem: a summary table, the
// timeline with offsets from the start, and the operators' notes. Times
// are UTC.
func Markdown(r Report) []byte {
	var b bytes.Buffer
	inc, s := r.Incident, r.Summary
	fmt.Fprintf(&b, "# Incident %d: %s\n\n", inc.ID, md(inc.DependencyKey.String()))
	status := "resolved"
	if s.Open {
		status = "open"
	}
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	b.WriteString("| | |\n|---|---|\n")
	row("Status", status)
	row("Start", stamp(s.Start))
	if s.Open {
		row("End", "still open")
	} else {
		row("End", stamp(s.End))
	}
	row("Duration", human(s.Duration))
	if s.DegradedSince.IsZero() {
		row("Time to first open", "no failures recorded before the first trip")
	} else {
		row("Time to first open", fmt.Sprintf("%s (failures from %s)", human(s.TimeToFirstOpen), timeOfDay(s.DegradedSince)))
	}
	row("Instances affected", fmt.Sprintf("%d (%s)", len(s.Instances), md(strings.Join(s.Instances, ", "))))
	row("Opens", fmt.Sprint(s.Opens))
	row("Calls rejected", fmt.Sprint(s.CallsRejected))
	row("Fallback calls", wording.FallbackCalls(s.FallbackSuccesses, s.FallbacksFailed))
	row("First trip", md(fmt.Sprintf("%s: %s", s.FirstInstance, s.Cause)))

	b.WriteString("\n## Timeline\n\n")
	if len(r.Timeline) == 0 {
		b.WriteString("No transitions, commands or notes were recorded.\n")
	} else {
		b.WriteString("| Time (UTC) | From start | Instance | What happened |\n|---|---|---|---|\n")
		for _, e := range r.Timeline {
			inst := e.Instance
			if inst == "" {
				inst = "-"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", timeOfDay(e.At), offset(e.At.Sub(s.Start)), md(inst), md(e.Text))
		}
	}
	if len(inc.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range inc.Notes {
			fmt.Fprintf(&b, "- %s, %s: %s\n", stamp(n.At), md(orSomeone(n.Author)), md(n.Text))
		}
	}
	return b.Bytes()
}

// JSON renders the report as indented JSON (the Report type's shape).
func JSON(r Report) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("incident: export json: %w", err)
	}
	return append(b, '\n'), nil
}

func stamp(t time.Time) string     { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") }
func timeOfDay(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// human prints a duration rounded to what a reader cares about.
func human(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func offset(d time.Duration) string {
	if d < 0 {
		return "-" + human(-d)
	}
	return "+" + human(d)
}

// md escapes what would break a Markdown table cell or inject markup.
var mdEscaper = strings.NewReplacer(`\`, `\\`, "|", `\|`, "\n", " ", "\r", " ", "<", "&lt;", ">", "&gt;", "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`)

func md(s string) string { return mdEscaper.Replace(s) }
