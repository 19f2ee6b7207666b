package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/spf13/cobra"
)

// actionWords is the dashboard's name of an action: one vocabulary.
func actionWords(a string) string {
	switch a {
	case actionForceOpen:
		return "force open"
	case actionForceClosed:
		return "force closed"
	}
	return a
}

type holdOptions struct {
	clientOptions
	For       time.Duration
	Reason    string
	Labels    map[string]string
	Instances []string
	Share     float64
	DryRun    bool
	// AllowEmpty creates a hold that matches no live instance now.
	AllowEmpty bool
	Wait       time.Duration
	StopIf     []string
	DropStops  []string
	DropWhy    string
	Steps      string
}

// drill reads the drill flags (--stop-if, --drop-stop-if, --drop-reason,
// --steps) into req.
func (o *holdOptions) drill(req *cbdash.HoldRequest) error {
	for _, s := range o.StopIf {
		c, err := cbdash.ParseStopCondition(s)
		if err != nil {
			return usageError{fmt.Errorf("--stop-if: %w", err)}
		}
		req.StopIf = append(req.StopIf, c)
	}
	if len(o.DropStops) > 0 && strings.TrimSpace(o.DropWhy) == "" {
		return usageError{fmt.Errorf("--drop-reason is required with --drop-stop-if: it goes into the audit log")}
	}
	req.DropStops, req.DropReason = o.DropStops, o.DropWhy
	if o.Steps != "" {
		steps, err := cbdash.ParseSteps(o.Steps)
		if err != nil {
			return usageError{fmt.Errorf("--steps: %w", err)}
		}
		req.Steps = steps
	}
	return nil
}

// newHoldCmd makes trip (force open) and hold-closed (force closed): a
// hold on every breaker the target and flags select, kept as desired
// state on the server and applied to instances that start later too.
func newHoldCmd(use, action string) *cobra.Command {
	var o holdOptions
	words := actionWords(action)
	cmd := &cobra.Command{
		Use:  use + " SERVICE/BREAKER|*/BREAKER",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, err := parseSelectorArg(args[0])
			if err != nil {
				return err
			}
			sel.Labels, sel.Instances, sel.Share = o.Labels, o.Instances, o.Share
			if o.Share < 0 || o.Share > 100 {
				return usageError{fmt.Errorf("--share must be within 0..100 (got %v)", o.Share)}
			}
			if o.For <= 0 {
				return usageError{fmt.Errorf("--for must be > 0 (got %v): a hold always has an end", o.For)}
			}
			if strings.TrimSpace(o.Reason) == "" {
				return usageError{fmt.Errorf("--reason is required to %s: it goes into the audit log", words)}
			}
			c, err := o.client(true) // a dry run is a POST of the operator role too
			if err != nil {
				return err
			}
			req := cbdash.HoldRequest{Selector: sel, Action: action, TTL: o.For, Reason: o.Reason}
			if err := o.drill(&req); err != nil {
				return err
			}
			if o.DryRun {
				return planHold(cmd.Context(), c, req, cmd.OutOrStdout())
			}
			if err := guardEmpty(cmd.Context(), c, req, o.AllowEmpty, cmd.ErrOrStderr()); err != nil {
				return err
			}
			return createHold(cmd.Context(), c, req, o.Wait, cmd.OutOrStdout())
		},
	}
	switch action {
	case actionForceOpen:
		cmd.Short = "Force open: every call through the selected breakers is rejected, on instances that start later too, until --for ends"
	default:
		cmd.Short = "Force closed: every call through the selected breakers passes and they never trip, until --for ends"
	}
	o.bind(cmd.Flags())
	cmd.Flags().DurationVar(&o.For, "for", 15*time.Minute, "how long the hold lasts before it ends by itself (at most the server's --max-hold)")
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log (required)")
	cmd.Flags().StringToStringVar(&o.Labels, "label", nil, "only instances with this label, KEY=VALUE (repeatable: all must match)")
	cmd.Flags().StringArrayVar(&o.Instances, "instance", nil, "only this instance (repeatable)")
	cmd.Flags().Float64Var(&o.Share, "share", 0, "only this percent of the instances, chosen by a stable hash of the instance id (0 or 100 = all)")
	cmd.Flags().BoolVar(&o.AllowEmpty, "allow-empty", false, "hold even if no live instance matches now (a hold ahead of a deploy): without it such a hold is refused, since a mistyped name would hold nothing")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "print the blast radius (services, instances, calls per second) and change nothing")
	cmd.Flags().DurationVar(&o.Wait, "wait", 5*time.Second, "how long to wait for the instances to answer (0 = do not wait)")
	cmd.Flags().StringArrayVar(&o.StopIf, "stop-if", nil, "release the hold everywhere at once when this is breached, besides the server's default stop conditions: 'fallback-failure-rate>20%', 'error-rate>30% for 10s', 'p99>500ms' (repeatable)")
	cmd.Flags().StringArrayVar(&o.DropStops, "drop-stop-if", nil, "do without this default stop condition of the server, as it lists it ('*' = all; repeatable; needs --drop-reason)")
	cmd.Flags().StringVar(&o.DropWhy, "drop-reason", "", "why the default stop conditions are dropped, for the audit log")
	cmd.Flags().StringVar(&o.Steps, "steps", "", "step the share of instances covered, each step only if no stop condition was breached: 5%:1m,25%:2m,100%:5m")
	return cmd
}

// parseSelectorArg reads SERVICE/BREAKER or */BREAKER.
func parseSelectorArg(s string) (cbdash.Selector, error) {
	sel, err := cbdash.ParseSelector(s)
	if err != nil {
		return sel, usageError{fmt.Errorf("bad breaker name %q: want SERVICE/BREAKER (checkout/payments) or */BREAKER (every service's inventory: */inventory)", s)}
	}
	return sel, nil
}

func planHold(ctx context.Context, c *apiClient, req cbdash.HoldRequest, w io.Writer) error {
	var p cbdash.HoldPlan
	if err := c.doOr(ctx, "POST", "/api/v1/holds/plan", "/api/v1/holds?dry_run=1", req, &p); err != nil {
		return err
	}
	verb := "rejected"
	if req.Action == actionForceClosed {
		verb = "let through without judging"
	}
	reached := 0.0
	if p.Eligible > 0 {
		reached = 100 * float64(len(p.Instances)) / float64(p.Eligible)
	}
	about := "about"
	if p.CallsUnknown > 0 { // instances served by another collector whose calls are not known here
		about = "more than"
	}
	fmt.Fprintf(w, "dry run: %s %s for %v would cover %d service(s) %v, %d of %d instance(s) now (%.0f%% reached), %s %.1f calls/s %s\n",
		actionWords(req.Action), clean(req.Selector.String()), req.TTL, len(p.Services), clean(fmt.Sprint(p.Services)), len(p.Instances), p.Eligible, reached,
		about, p.CallsPerSecond, verb)
	if p.CallsUnknown > 0 {
		fmt.Fprintf(w, "  (the calls of %d instance(s) served by other collectors are not known here)\n", p.CallsUnknown)
	}
	for _, inst := range p.Instances {
		fmt.Fprintf(w, "  %s\n", clean(fmt.Sprint(inst)))
	}
	if len(p.Superseded) > 0 {
		fmt.Fprintf(w, "it would take precedence (most recent wins) over hold(s) %s where both match\n", clean(strings.Join(p.Superseded, ", ")))
	}
	if len(p.Stops) > 0 {
		fmt.Fprintf(w, "it would stop by itself if: %s\n", clean(stopList(p.Stops)))
	}
	if len(p.Instances) == 0 {
		fmt.Fprintf(w, "%s; the hold would need --allow-empty\n", clean(whyEmpty(ctx, c, req.Selector)))
	}
	fmt.Fprintln(w, "nothing was changed")
	if len(p.Refused) > 0 {
		for _, r := range p.Refused {
			fmt.Fprintf(w, "  refused: %s\n", clean(r))
		}
		return fmt.Errorf("pre-flight would refuse this drill: %s", clean(strings.Join(p.Refused, "; ")))
	}
	return nil
}

// guardEmpty refuses, before anything is held, a hold that matches no
// live instance now (a mistyped SERVICE/BREAKER, label or instance
// would otherwise hold nothing, silently), naming the breakers the
// service has; with allowEmpty (a hold ahead of a deploy) it only warns
// on w and says how to end the hold. When the plan cannot be read (a
// server without it, or an answer without the plan's instances list),
// it lets the hold through: creating it says why it fails, if it does.
func guardEmpty(ctx context.Context, c *apiClient, req cbdash.HoldRequest, allowEmpty bool, w io.Writer) error {
	var p cbdash.HoldPlan
	if err := c.doOr(ctx, "POST", "/api/v1/holds/plan", "/api/v1/holds?dry_run=1", req, &p); err != nil || p.Instances == nil || len(p.Instances) > 0 || len(p.Unsupported) > 0 {
		return nil
	}
	why := clean(whyEmpty(ctx, c, req.Selector))
	if !allowEmpty {
		return fmt.Errorf("%s; nothing was held. To hold it anyway for the instances that start later (ahead of a deploy), add --allow-empty", why)
	}
	fmt.Fprintf(w, "warning: %s; the hold covers the instances that start later. End it with: cbdash release %s --reason ... (or by its hold id)\n",
		why, clean(req.Selector.String()))
	return nil
}

// whyEmpty says why selector sel matches no live instance: an unknown
// service (with the live ones), a breaker the service does not have
// (with the ones it has), or narrowings (--label, --instance, --share)
// that leave none.
func whyEmpty(ctx context.Context, c *apiClient, sel cbdash.Selector) string {
	target := sel.Service + "/" + sel.Breaker
	var deps []cbdash.Dependency
	if c.doOr(ctx, "GET", "/api/v1/dependencies", "/api/v1/breakers", nil, &deps) != nil {
		return target + " matches no live instance now"
	}
	var services, breakers []string
	found := false
	for _, d := range deps {
		if !slices.Contains(services, d.Service) {
			services = append(services, d.Service)
		}
		if d.Service == sel.Service {
			breakers = append(breakers, d.Breaker)
		}
		if (sel.Service == cbdash.AnyService || d.Service == sel.Service) && d.Breaker == sel.Breaker {
			found = true
		}
	}
	slices.Sort(services)
	slices.Sort(breakers)
	switch {
	case found:
		return target + " is live, but --label, --instance or --share select none of its instances now"
	case sel.Service == cbdash.AnyService:
		return "no live service has a breaker " + sel.Breaker
	case len(breakers) == 0:
		return fmt.Sprintf("service %s is unknown: no live instance reports it (live services: %s)", sel.Service, listOrNone(services))
	}
	if len(breakers) == 1 {
		return fmt.Sprintf("%s matches no live instance now: service %s has one breaker, %s", target, sel.Service, breakers[0])
	}
	return fmt.Sprintf("%s matches no live instance now: service %s has the breakers %s", target, sel.Service, strings.Join(breakers, ", "))
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func createHold(ctx context.Context, c *apiClient, req cbdash.HoldRequest, wait time.Duration, w io.Writer) error {
	var h cbdash.HoldRecord
	if err := c.do(ctx, "POST", "/api/v1/holds", req, &h); err != nil {
		return err
	}
	if (len(req.StopIf) > 0 && len(h.Stops) == 0) || (len(req.Steps) > 0 && len(h.Steps) == 0) {
		// A server older than stop conditions (API 1.2.0) ignored them:
		// a drill that cannot stop itself is ended at once.
		_ = c.do(ctx, "POST", "/api/v1/holds/"+url.PathEscape(h.ID)+"/release",
			map[string]string{"reason": "the server ignored the drill's stop conditions or steps"}, &h)
		return fmt.Errorf("the server does not support stop conditions or steps (API 1.2.0): hold %s was released at once", clean(h.ID))
	}
	deadline := time.Now().Add(wait)
	for holdPending(h) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if err := c.do(ctx, "GET", "/api/v1/holds/"+url.PathEscape(h.ID), nil, &h); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "%s %s: hold %s until %s, %d instance(s) now; instances that start later are covered too\n",
		actionWords(h.Action), clean(h.Selector.String()), clean(h.ID), h.Until.Local().Format(time.TimeOnly), len(h.Coverage))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	failed := 0
	for _, cv := range h.Coverage {
		detail := cv.State
		if cv.Error != "" {
			detail = cv.Error
			failed++
		}
		fmt.Fprintf(tw, "  %s/%s\t%s\t%s\t%s\n", clean(cv.Service), clean(cv.Instance), clean(cv.Breaker), clean(cv.Status), clean(detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(h.Stops) > 0 {
		fmt.Fprintf(w, "stops by itself if: %s\n", clean(stopList(h.Stops)))
	}
	fmt.Fprintf(w, "follow it: cbdash holds; end it: cbdash release %s --reason ...\n", clean(h.ID))
	if failed > 0 {
		return fmt.Errorf("%d instance(s) could not apply the hold", failed)
	}
	return nil
}

func holdPending(h cbdash.HoldRecord) bool {
	for _, c := range h.Coverage {
		if c.Status == cbdash.TargetPending {
			return true
		}
	}
	return false
}

var holdIDPattern = regexp.MustCompile(`^h[0-9a-f]{16}$`)

// releaseHold ends a hold by id and prints each instance's answer to the
// release.
func releaseHold(ctx context.Context, c *apiClient, id, reason string, wait time.Duration, w io.Writer) error {
	var h cbdash.HoldRecord
	if err := c.do(ctx, "POST", "/api/v1/holds/"+url.PathEscape(id)+"/release", map[string]string{"reason": reason}, &h); err != nil {
		return err
	}
	fmt.Fprintf(w, "released hold %s (%s %s), by %s: %s\n", clean(h.ID), actionWords(h.Action), clean(h.Selector.String()), clean(h.ReleasedBy), clean(h.ReleaseReason))
	var cmds []cbdash.Command
	deadline := time.Now().Add(wait)
	for {
		if err := c.do(ctx, "GET", "/api/v1/commands?limit=200", nil, &cmds); err != nil {
			return err
		}
		busy := false
		for _, cmd := range cmds {
			if cmd.HoldID == id && cmd.Action == actionRelease && pending(cmd) {
				busy = true
			}
		}
		if !busy || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, cmd := range cmds {
		if cmd.HoldID != id || cmd.Action != actionRelease {
			continue
		}
		for _, t := range cmd.Targets {
			detail := t.State
			if t.Error != "" {
				detail = t.Error
			}
			fmt.Fprintf(tw, "  %s/%s\t%s\t%s\t%s\n", clean(cmd.Service), clean(t.Instance), clean(cmd.Breaker), clean(t.Status), clean(detail))
		}
	}
	return tw.Flush()
}

type holdsOptions struct {
	clientOptions
	All  bool
	JSON bool
}

// newHoldsCmd lists holds and prints drill reports.
func newHoldsCmd() *cobra.Command {
	var o holdsOptions
	cmd := &cobra.Command{
		Use:   "holds",
		Short: "List the holds (force open / force closed) in force, with their expiry and coverage",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client(false)
			if err != nil {
				return err
			}
			path := "/api/v1/holds?live=1"
			if o.All {
				path = "/api/v1/holds?limit=100"
			}
			var hs []cbdash.HoldRecord
			if err := c.do(cmd.Context(), "GET", path, nil, &hs); err != nil {
				return err
			}
			if o.JSON {
				out, err := json.MarshalIndent(hs, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), cleanJSON(string(out)))
				return err
			}
			return printHolds(cmd.OutOrStdout(), hs, time.Now())
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.All, "all", false, "also the holds that ended (the newest 100)")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the server's JSON")
	var ro clientOptions
	var asJSON, asMarkdown bool
	report := &cobra.Command{
		Use:   "report HOLD-ID",
		Short: "Print the drill report of a hold (--markdown: the Markdown as is, for a file or a wiki; --json: as JSON)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := ro.client(false)
			if err != nil {
				return err
			}
			path := "/api/v1/holds/" + url.PathEscape(args[0]) + "/report"
			var out []byte
			if asJSON {
				err = c.do(cmd.Context(), "GET", path, nil, &out)
			} else { // a server of API 1.0.0 has no report.md
				err = c.doOr(cmd.Context(), "GET", path+".md", path+"?format=md", nil, &out)
			}
			if err != nil {
				return err
			}
			text := cleanText(markdownForTerminal(string(out)))
			switch {
			case asJSON:
				text = cleanJSON(string(out))
			case asMarkdown:
				text = cleanText(string(out))
			}
			if !strings.HasSuffix(text, "\n") { // the shell's prompt on a line of its own
				text += "\n"
			}
			_, err = io.WriteString(cmd.OutOrStdout(), text)
			return err
		},
	}
	ro.bind(report.Flags())
	report.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	report.Flags().BoolVar(&asMarkdown, "markdown", false, "print the report's Markdown with its escapes (\\*, &gt;): what a Markdown viewer reads")
	cmd.AddCommand(report)
	return cmd
}

func printHolds(w io.Writer, hs []cbdash.HoldRecord, now time.Time) error {
	if len(hs) == 0 { // a sentence, not a header over nothing
		_, err := fmt.Fprintln(w, "no hold in force (cbdash holds --all: also the holds that ended)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOLD\tACTION\tSELECTOR\tBY\tWHY\tUNTIL\tCOVERAGE")
	for _, h := range hs {
		until := h.Until.Local().Format(time.TimeOnly)
		switch {
		case !h.ReleasedAt.IsZero() && h.ReleasedAt.Before(h.Until):
			until = "released " + h.ReleasedAt.Local().Format(time.TimeOnly) + " by " + h.ReleasedBy
		case h.Until.After(now):
			until += " (in " + h.Until.Sub(now).Round(time.Second).String() + ")"
		default:
			until += " (expired)"
		}
		counts := map[string]int{}
		for _, c := range h.Coverage {
			counts[c.Status]++
		}
		cov := fmt.Sprintf("%d instance(s)", len(h.Coverage))
		for _, st := range []string{cbdash.TargetApplied, cbdash.TargetPending, cbdash.TargetFailed} {
			if counts[st] > 0 {
				cov += fmt.Sprintf(", %d %s", counts[st], st)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(h.ID), actionWords(h.Action), clean(h.Selector.String()), clean(h.Actor), clean(h.Reason), until, cov)
	}
	return tw.Flush()
}

// stopList writes stop conditions as the CLI takes them, comma-separated.
func stopList(stops []cbdash.StopCondition) string {
	names := make([]string, len(stops))
	for i, c := range stops {
		names[i] = c.String()
	}
	return strings.Join(names, ", ")
}
