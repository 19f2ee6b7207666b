package holds

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// Report builds the drill report of hold id: its coverage (one row per
// instance breaker, the latest answer of a process restarted under the
// same id), what each covered breaker counted while held (exactly the sum
// of its window reports that overlap the hold from the moment it was sent
// to the breaker: no call the hold rejected is missed, and a report's
// calls before or after the hold within it count too), and each covered
// dependency before and during the hold from stored history (in whole
// seconds, CountedFrom to CountedTo; "before" spans as long as "during",
// at least 1 s and at most an hour). The two differ by the ends of the
// instances' reports, which are not aligned to the store's seconds, and
// by instances not covered; CountedText says so. Errors:
// cbdash.ErrNotFound, or the store's error.
func (m *Manager) Report(ctx context.Context, id string) (cbdash.HoldReport, error) {
	h, err := m.cfg.Store.Hold(ctx, id)
	if err != nil {
		return cbdash.HoldReport{}, err
	}
	now := m.now().UTC()
	r := cbdash.HoldReport{Hold: h, Start: h.CreatedAt, End: h.End(), Ongoing: h.LiveAt(now), Result: cbdash.DrillResult(h, now),
		Instances: []cbdash.HoldInstanceReport{}, Dependencies: []cbdash.HoldDependencyReport{}}
	counts, err := m.countsOf(ctx, id)
	if err != nil {
		return cbdash.HoldReport{}, err
	}
	byKey := make(map[[3]string]cbdash.HoldCounts, len(counts))
	for _, hc := range counts {
		byKey[[3]string{hc.Service, hc.Instance, hc.Breaker}] = hc
	}
	var total cbdash.HoldCounts
	deps := map[cbdash.DependencyKey]bool{}
	seen := map[[3]string]int{} // a restart under the same id is one row, its latest answer
	for _, cv := range h.Coverage {
		key := [3]string{cv.Service, cv.Instance, cv.Breaker}
		row := cbdash.HoldInstanceReport{Service: cv.Service, Instance: cv.Instance, Breaker: cv.Breaker,
			CoveredAt: cv.CoveredAt, JoinedLate: cv.JoinedLate, Status: cv.Status, State: cv.State, Error: cv.Error}
		if i, ok := seen[key]; ok {
			row.CoveredAt, row.JoinedLate = r.Instances[i].CoveredAt, r.Instances[i].JoinedLate
			row.During = r.Instances[i].During
			r.Instances[i] = row
			continue
		}
		hc := byKey[key]
		row.During = cbdash.NewHoldPeriod(hc.Counts, hc.Latency)
		total.Counts.Add(hc.Counts)
		total.AddWindow(protocol.Window{Latency: hc.Latency})
		seen[key] = len(r.Instances)
		r.Instances = append(r.Instances, row)
		deps[cbdash.DependencyKey{Service: cv.Service, Breaker: cv.Breaker}] = true
	}
	r.Total = cbdash.NewHoldPeriod(total.Counts, total.Latency)
	r.Steps = stepReports(h, r.Instances, byKey)
	end := r.End
	if now.Before(end) {
		end = now
	}
	r.CountedFrom = r.Start.Truncate(time.Second)
	r.CountedTo = r.CountedFrom.Add(max(end.Sub(r.CountedFrom), time.Second))
	if t := r.CountedTo.Truncate(time.Second); t.Before(r.CountedTo) {
		r.CountedTo = t.Add(time.Second) // the store's seconds: the one the hold ended in counts whole
	}
	if r.Dependencies, err = m.dependencyReports(ctx, deps, r.Start, end); err != nil {
		return cbdash.HoldReport{}, err
	}
	return r, nil
}

// dependencyReports is each dependency of deps before and during a hold
// that started at start and ended (or is now) at end, sorted.
func (m *Manager) dependencyReports(ctx context.Context, deps map[cbdash.DependencyKey]bool, start, end time.Time) ([]cbdash.HoldDependencyReport, error) {
	// History is kept in buckets of whole seconds: the split falls on the
	// second the hold started in (its calls count as during), and each span
	// is at least one bucket, so a bucket is never counted on both sides.
	split := start.Truncate(time.Second)
	span := min(max(end.Sub(split), time.Second), time.Hour).Round(time.Second)
	out := []cbdash.HoldDependencyReport{}
	for k := range deps {
		dr := cbdash.HoldDependencyReport{DependencyKey: k}
		var err error
		if dr.Before, err = m.period(ctx, k, split.Add(-span), split); err != nil {
			return nil, err
		}
		if dr.During, err = m.period(ctx, k, split, split.Add(max(end.Sub(split), time.Second))); err != nil {
			return nil, err
		}
		out = append(out, dr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// period sums the stored history of k over [from, to).
func (m *Manager) period(ctx context.Context, k cbdash.DependencyKey, from, to time.Time) (cbdash.HoldPeriod, error) {
	if !from.Before(to) {
		return cbdash.HoldPeriod{}, nil
	}
	pts, err := m.cfg.Store.History(ctx, cbdash.HistoryQuery{DependencyKey: k, From: from, To: to})
	if err != nil {
		return cbdash.HoldPeriod{}, err
	}
	var sum cbdash.HoldCounts
	for _, p := range pts {
		sum.AddWindow(protocol.Window{Counts: p.Counts, Latency: p.Latency})
	}
	return cbdash.NewHoldPeriod(sum.Counts, sum.Latency), nil
}

// ReportMarkdown renders a drill report as Markdown: a header list (hold,
// who, why, start, end, instances covered), a table of the covered
// breakers during the hold with a total row, and a table of the callers
// before and during. Text from operators and agents is escaped.
func ReportMarkdown(r cbdash.HoldReport) []byte {
	var b bytes.Buffer
	h := r.Hold
	fmt.Fprintf(&b, "# Drill report: %s %s\n\n", actionWords(h.Action), mdText(h.Selector.String()))
	fmt.Fprintf(&b, "- Hold: `%s`\n- Who: %s\n- Why: %s\n- Start: %s\n", h.ID, mdText(h.Actor), mdText(h.Reason), stampUTC(r.Start))
	switch {
	case h.Breach != nil:
		fmt.Fprintf(&b, "- End: %s, STOPPED: %s\n", stampUTC(r.End), mdText(h.ReleaseReason))
		fmt.Fprintf(&b, "- First instances above it: %s\n", mdText(strings.Join(h.Breach.Instances, ", ")))
	case r.Ongoing:
		fmt.Fprintf(&b, "- End: ongoing, expires %s\n", stampUTC(h.Until))
	case !h.ReleasedAt.IsZero() && h.ReleasedAt.Before(h.Until):
		fmt.Fprintf(&b, "- End: %s, released by %s: %s\n", stampUTC(r.End), mdText(h.ReleasedBy), mdText(h.ReleaseReason))
	default:
		fmt.Fprintf(&b, "- End: %s, expired\n", stampUTC(r.End))
	}
	late := 0
	for _, in := range r.Instances {
		if in.JoinedLate {
			late++
		}
	}
	fmt.Fprintf(&b, "- Instances covered: %d (%d joined later)\n", len(r.Instances), late)
	fmt.Fprintf(&b, "- Counted: %s\n", CountedText(r))
	fmt.Fprintf(&b, "- Result: %s\n%s\n", strings.ToUpper(r.Result), stopsLine(h.Stops))
	b.WriteString("## During the hold\n\n| Instance | Breaker | Covered | Answer | Calls | Rejected | Fallbacks served | Fallbacks failed | Error rate | p50 | p99 |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	row := func(inst, br, covered, answer string, p cbdash.HoldPeriod) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %d | %d | %d | %.1f%% | %s | %s |\n", inst, br, covered, answer,
			p.Calls, p.Counts.Rejected(), p.Counts.FallbackSuccess, p.Counts.FallbackFailure, p.ErrorRate, wording.Latency(p.P50), wording.Latency(p.P99))
	}
	for _, in := range r.Instances {
		covered := clockUTC(in.CoveredAt)
		if in.JoinedLate {
			covered += " (joined later)"
		}
		answer := AnswerText(in, r.Ongoing)
		if in.Error != "" {
			answer += ": " + in.Error
		}
		row(mdText(in.Service+"/"+in.Instance), mdText(in.Breaker), covered, mdText(answer), in.During)
	}
	row("**total**", "", "", "", r.Total)
	stepsMarkdown(&b, r.Steps)
	b.WriteString("\n## Callers before and during\n\nEvery instance of each dependency, covered or not, in the store's whole seconds.\n\n| Dependency | Calls before | Calls during | Error rate before | Error rate during | p99 before | p99 during |\n|---|---|---|---|---|---|---|\n")
	for _, d := range r.Dependencies {
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f%% | %.1f%% | %s | %s |\n", mdText(d.String()), d.Before.Calls, d.During.Calls,
			d.Before.ErrorRate, d.During.ErrorRate, wording.Latency(d.Before.P99), wording.Latency(d.During.P99))
	}
	return b.Bytes()
}

// CountedText says what r's two sets of figures count and why they
// differ: each covered breaker's window reports that overlap the hold
// (about a second each, not aligned to the store's seconds: calls up to
// a second before and after the hold count), and the callers' whole
// seconds; a hold shorter than a second is said to be mostly outside
// what is counted.
func CountedText(r cbdash.HoldReport) string {
	s := fmt.Sprintf("breakers: each window report (about 1 s) that overlaps the hold, from when it reached the breaker, so calls up to a second before and after it count too; "+
		"callers: the whole seconds %s to %s UTC (%s); the two differ by those edges and by instances not covered",
		clockUTC(r.CountedFrom), clockUTC(r.CountedTo), wording.Span(r.CountedTo.Sub(r.CountedFrom)))
	if d := r.End.Sub(r.Start); !r.Ongoing && d < time.Second {
		s = fmt.Sprintf("the hold lasted %s, less than the reports: most of what is counted below is from before or after it (%s)", d.Round(time.Millisecond), s)
	}
	return s
}

// CallersCounted is the seconds r's callers' figures count, in short:
// "12:00:05 to 12:00:07 UTC (2s)", with, for a hold shorter than a
// second, that most of what is counted is from before or after it.
func CallersCounted(r cbdash.HoldReport) string {
	s := fmt.Sprintf("%s to %s UTC (%s)", clockUTC(r.CountedFrom), clockUTC(r.CountedTo), wording.Span(r.CountedTo.Sub(r.CountedFrom)))
	if d := r.End.Sub(r.Start); !r.Ongoing && d < time.Second {
		s += fmt.Sprintf("; the hold lasted %s, less than the reports: most of what is counted is from before or after it", d.Round(time.Millisecond))
	}
	return s
}

// AnswerText is a covered breaker's answer to a hold in words, without
// its error: "applied, now forced open" while the hold is ongoing,
// "applied, forced open until the hold ended" after (the state is the one
// the breaker answered with when the hold reached it, not its state now).
func AnswerText(in cbdash.HoldInstanceReport, ongoing bool) string {
	answer := in.Status
	if in.State == "" {
		return answer
	}
	st := strings.ReplaceAll(in.State, "_", " ")
	if in.State == protocol.StateHalfOpen {
		st = "half-open"
	}
	if ongoing {
		return answer + ", now " + st
	}
	return answer + ", " + st + " until the hold ended"
}

func actionWords(a string) string {
	switch a {
	case protocol.ActionForceOpen:
		return "force open"
	case protocol.ActionForceClosed:
		return "force closed"
	}
	return a
}

func stampUTC(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
func clockUTC(t time.Time) string { return t.UTC().Format("15:04:05") }

var mdReplacer = strings.NewReplacer("\\", "\\\\", "[", "\\[", "]", "\\]", "<", "&lt;", ">", "&gt;", "\r", " ", "|", "\\|", "*", "\\*", "_", "\\_", "`", "\\`", "\n", " ")

func mdText(s string) string { return mdReplacer.Replace(s) }

// stepReports is the steps of stepped hold h (nil without steps): each
// instance breaker of rows counts for the step it was first covered in.
func stepReports(h cbdash.HoldRecord, rows []cbdash.HoldInstanceReport, counts map[[3]string]cbdash.HoldCounts) []cbdash.HoldStepReport {
	if len(h.Steps) == 0 {
		return nil
	}
	out := make([]cbdash.HoldStepReport, len(h.Steps))
	sums := make([]cbdash.HoldCounts, len(h.Steps))
	start := h.CreatedAt
	for i, st := range h.Steps {
		out[i] = cbdash.HoldStepReport{Step: i + 1, Share: st.Share, Start: start,
			Reached: i == 0 || (start.Before(h.End()) && (h.Breach == nil || h.Breach.Step > i))}
		start = start.Add(st.For)
	}
	for _, row := range rows {
		i, _ := cbdash.StepAt(h.Steps, row.CoveredAt.Sub(h.CreatedAt))
		hc := counts[[3]string{row.Service, row.Instance, row.Breaker}]
		out[i-1].Instances++
		sums[i-1].Counts.Add(hc.Counts)
		sums[i-1].AddWindow(protocol.Window{Latency: hc.Latency})
	}
	for i := range out {
		out[i].During = cbdash.NewHoldPeriod(sums[i].Counts, sums[i].Latency)
	}
	return out
}

// stepsMarkdown writes the steps of a stepped drill's report as a table.
func stepsMarkdown(b *bytes.Buffer, steps []cbdash.HoldStepReport) {
	if len(steps) == 0 {
		return
	}
	b.WriteString("\n## Steps\n\n| Step | Share | Due | Reached | Instances added | Calls | Rejected | Fallbacks failed | Error rate |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, st := range steps {
		reached := "no"
		if st.Reached {
			reached = "yes"
		}
		fmt.Fprintf(b, "| %d | %g%% | %s | %s | %d | %d | %d | %d | %.1f%% |\n", st.Step, st.Share, clockUTC(st.Start), reached,
			st.Instances, st.During.Calls, st.During.Counts.Rejected(), st.During.Counts.FallbackFailure, st.During.ErrorRate)
	}
}

// stopsLine is the report's line of stop conditions ("" without any).
func stopsLine(stops []cbdash.StopCondition) string {
	if len(stops) == 0 {
		return ""
	}
	names := make([]string, len(stops))
	for i, c := range stops {
		names[i] = "`" + c.String() + "`"
	}
	return "- Stop conditions: " + strings.Join(names, ", ") + "\n"
}
