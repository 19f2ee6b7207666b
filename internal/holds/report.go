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
// same id), what each covered breaker counted while held, and each
// covered dependency before and during the hold from stored history. Both
// count whole seconds, the same ones: window reports are per second, and
// a second counts when the hold covered its middle (CountedFrom,
// CountedTo; a breaker's from when the hold reached it); "before" spans
// as many seconds, at least 1 and at most an hour. Errors:
// cbdash.ErrNotFound, or the store's error.
func (m *Manager) Report(ctx context.Context, id string) (cbdash.HoldReport, error) {
	h, err := m.cfg.Store.Hold(ctx, id)
	if err != nil {
		return cbdash.HoldReport{}, err
	}
	now := m.now().UTC()
	r := cbdash.HoldReport{Hold: h, Start: h.CreatedAt, End: h.End(), Ongoing: h.LiveAt(now), Result: cbdash.DrillResult(h, now),
		Instances: []cbdash.HoldInstanceReport{}, Dependencies: []cbdash.HoldDependencyReport{}}
	counts := m.Counts(id)
	if counts == nil {
		if counts, err = m.cfg.Store.HoldStats(ctx, id); err != nil {
			return cbdash.HoldReport{}, err
		}
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
	r.CountedFrom, r.CountedTo = countedSeconds(r.Start, end)
	if r.Dependencies, err = m.dependencyReports(ctx, deps, r.CountedFrom, r.CountedTo); err != nil {
		return cbdash.HoldReport{}, err
	}
	return r, nil
}

// dependencyReports is each dependency of deps before and during a hold
// whose counted seconds are [lo, hi) (countedSeconds), sorted: during,
// those seconds (none for a hold that covered no second's middle);
// before, as many seconds before them, at least 1 and at most an hour.
func (m *Manager) dependencyReports(ctx context.Context, deps map[cbdash.DependencyKey]bool, lo, hi time.Time) ([]cbdash.HoldDependencyReport, error) {
	span := min(max(hi.Sub(lo), time.Second), time.Hour)
	out := []cbdash.HoldDependencyReport{}
	for k := range deps {
		dr := cbdash.HoldDependencyReport{DependencyKey: k}
		var err error
		if dr.Before, err = m.period(ctx, k, lo.Add(-span), lo); err != nil {
			return nil, err
		}
		if dr.During, err = m.period(ctx, k, lo, hi); err != nil {
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
	b.WriteString("\n## Callers before and during\n\nEvery instance of each dependency, covered or not, over the same seconds as above.\n\n| Dependency | Calls before | Calls during | Error rate before | Error rate during | p99 before | p99 during |\n|---|---|---|---|---|---|---|\n")
	for _, d := range r.Dependencies {
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f%% | %.1f%% | %s | %s |\n", mdText(d.String()), d.Before.Calls, d.During.Calls,
			d.Before.ErrorRate, d.During.ErrorRate, wording.Latency(d.Before.P99), wording.Latency(d.During.P99))
	}
	return b.Bytes()
}

// CountedText says which seconds r's figures count: "the whole seconds
// 12:00:01 to 12:00:11 UTC (10 s): window reports are per second; a
// second counts when the hold covered its middle, a breaker's from when
// the hold reached it", or, for a hold too short to cover a second's
// middle, that nothing is counted.
func CountedText(r cbdash.HoldReport) string {
	const why = "window reports are per second; a second counts when the hold covered its middle, a breaker's from when the hold reached it"
	n := r.CountedTo.Sub(r.CountedFrom)
	if n <= 0 {
		return fmt.Sprintf("nothing: the hold lasted %s and covered the middle of no second (%s)", r.End.Sub(r.Start).Round(time.Millisecond), why)
	}
	return fmt.Sprintf("the whole seconds %s to %s UTC (%s): %s", clockUTC(r.CountedFrom), clockUTC(r.CountedTo), wording.Span(n), why)
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
