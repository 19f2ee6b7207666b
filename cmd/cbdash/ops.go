package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
	"github.com/cbdash/cbdash/internal/wording"
	"github.com/cbdash/cbdash/sdk/protocol"
	"github.com/spf13/cobra"
)

const (
	actionForceOpen   = protocol.ActionForceOpen
	actionForceClosed = protocol.ActionForceClosed
	actionRelease     = protocol.ActionRelease
	actionReset       = protocol.ActionReset
)

type statusOptions struct {
	clientOptions
	JSON bool
	Sort string
}

func newStatusCmd(clk clock.Clock) *cobra.Command {
	var o statusOptions
	cmd := &cobra.Command{
		Use:   "status [SERVICE[/BREAKER]|*/BREAKER]",
		Short: "Show the breakers of the fleet, worst first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client(false)
			if err != nil {
				return err
			}
			filter := ""
			if len(args) == 1 {
				filter = args[0]
			}
			order, err := cbdash.ParseOrder(o.Sort)
			if err != nil {
				return usageError{fmt.Errorf("--sort: %w", err)}
			}
			return status(cmd.Context(), c, filter, order, o.JSON, clk.Now(), cmd.OutOrStdout())
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the server's JSON")
	cmd.Flags().StringVar(&o.Sort, "sort", cbdash.OrderWorst, "the order, as the overview sorts: "+strings.Join(cbdash.Orders, ", ")+
		" (error_rate and p99 over the last minute, highest first)")
	return cmd
}

// status prints the breakers of the fleet (of filter: a service, or one
// dependency with its instances) in order (cbdash.Orders), as JSON when
// asJSON.
func status(ctx context.Context, c *apiClient, filter, order string, asJSON bool, now time.Time, w io.Writer) error {
	var deps []cbdash.Dependency
	filter, breaker, err := statusFilter(filter)
	if err != nil {
		return err
	}
	if filter != "" && strings.Contains(filter, "/") {
		service, breaker, err := parseTarget(filter)
		if err != nil {
			return err
		}
		d, err := dependencyWithMembers(ctx, c, service, breaker)
		if err != nil {
			return err
		}
		deps = []cbdash.Dependency{d}
	} else {
		// The summaries (a server of API 1.0.0 answers them on the list).
		q := "?service=" + url.QueryEscape(filter)
		if order != cbdash.OrderWorst {
			q += "&sort=" + url.QueryEscape(order)
		}
		if err := c.doOr(ctx, "GET", "/api/v1/dependencies"+q, "/api/v1/breakers"+q, nil, &deps); err != nil {
			return err
		}
		if order != cbdash.OrderWorst {
			// The same order here: a server older than API 1.2.0 ignores ?sort=.
			cbdash.SortDependencies(deps, order)
		}
		if breaker != "" {
			deps = slices.DeleteFunc(deps, func(d cbdash.Dependency) bool { return d.Breaker != breaker })
			if len(deps) == 0 {
				return fmt.Errorf("no live service has a breaker %s (cbdash status lists them all)", clean(breaker))
			}
		}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(deps)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	perInstance := filter != "" && strings.Contains(filter, "/")
	elsewhere := false // an instance line served by another collector
	// The same words and figures as the dashboard's tile: the state on how
	// many instances, open since, admitted and rejected calls per second
	// over the last minute, and the rates of cbdash.RatesOf (the tripped-at
	// rate of an open breaker).
	// A dependency's rates and p99 are over the last minute; an
	// instance's rates over its last report (a second or so).
	fmt.Fprintln(tw, "BREAKER\tSTATE\tOPEN SINCE\tADMITTED/S (1 MIN)\tREJECTED/S (1 MIN)\tFAILURE RATE\tSLOW-CALL RATE\tP99 (1 MIN)\tOPENS TODAY\tHELD")
	for _, d := range deps {
		held := "-"
		if d.Held != nil {
			held = actionWords(d.Held.Action) + " by " + d.Held.Actor
			if !d.Held.Until.IsZero() {
				held += " until " + d.Held.Until.Local().Format(time.TimeOnly)
			}
		}
		inst := wording.Instances(d)
		if d.Stale > 0 {
			inst += fmt.Sprintf(", %d stale", d.Stale)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
			clean(d.DependencyKey.String()), clean(inst), sinceText(d.OpenSince, now), wording.PerSecond(d.AdmittedRate), wording.PerSecond(d.RejectedRate),
			clean(wording.RateCell(d.Shown.Failure)), clean(wording.RateCell(d.Shown.Slow)), latencyText(d.P99), d.OpensToday, clean(held))
		if perInstance {
			for _, ib := range d.PerInstance {
				elsewhere = elsewhere || ib.Elsewhere
				instanceStatus(tw, ib, now)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if perInstance {
		note := "(instance rows: rates over each instance's last report; dependency rows: over the last minute)"
		if elsewhere {
			note += "\n(" + wording.Elsewhere + ": an instance served by another collector; its calls and rates are known only there, the dependency row counts them)"
		}
		_, err := fmt.Fprintln(w, note)
		return err
	}
	return nil
}

// instanceStatus prints instance line ib as status's row under its
// dependency's: state, open since, admitted and rejected calls per second
// and the rates of its last report; of a line served by another
// collector (ib.Elsewhere) "-" for the figures known only there (all but
// the rates at a known trip) and its state says "(on another collector)".
func instanceStatus(w io.Writer, ib *cbdash.InstanceBreaker, now time.Time) {
	state := wording.State(ib.State)
	if ib.Stale {
		state += " (stale)"
	}
	var adm, rej float64
	if ib.Last != nil && ib.Last.Millis > 0 { // the server always sends it; a null would read as none
		secs := float64(ib.Last.Millis) / 1000
		adm, rej = float64(ib.Last.Counts.Admitted)/secs, float64(ib.Last.Counts.Rejected())/secs
	}
	admitted, rejected := wording.PerSecond(adm), wording.PerSecond(rej)
	failure, slow := wording.RateCell(ib.Shown.Failure), wording.RateCell(ib.Shown.Slow)
	if ib.Elsewhere {
		state += " (" + wording.Elsewhere + ")"
		admitted, rejected = "-", "-"
		if !ib.Shown.Failure.Judged {
			failure = "-"
		}
		if !ib.Shown.Slow.Judged {
			slow = "-"
		}
	}
	fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t\t\t\n",
		clean(ib.Instance), clean(state), sinceText(ib.OpenSince, now), admitted, rejected, clean(failure), clean(slow))
}

// statusFilter reads status's argument: SERVICE, SERVICE/BREAKER,
// */BREAKER (that breaker of every service: breaker is set, filter
// empty) or SERVICE/* (the service). Other wildcards are a usage error.
func statusFilter(arg string) (filter, breaker string, err error) {
	service, br, isDep := strings.Cut(arg, "/")
	switch {
	case isDep && service == cbdash.AnyService && br != "" && !strings.ContainsAny(br, "*?["):
		return "", br, nil
	case isDep && br == "*" && service != "" && !strings.ContainsAny(service, "*?["):
		return service, "", nil
	case strings.ContainsAny(arg, "*?["):
		return "", "", usageError{fmt.Errorf("status %q: the only wildcards status takes are */BREAKER (that breaker in every service) and SERVICE/* (every breaker of the service)", arg)}
	}
	return arg, "", nil
}

// dependencyWithMembers reads one dependency with every member, page by
// page (the server answers them the odd ones first).
func dependencyWithMembers(ctx context.Context, c *apiClient, service, breaker string) (cbdash.Dependency, error) {
	path := "/api/v1/breakers/" + url.PathEscape(service) + "/" + url.PathEscape(breaker) + "?limit=1000"
	var all []*cbdash.InstanceBreaker
	for cursor := ""; ; {
		var page struct {
			cbdash.Dependency
			Next string `json:"next"`
		}
		q := path
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		if err := c.do(ctx, "GET", q, nil, &page); err != nil {
			return cbdash.Dependency{}, err
		}
		for _, ib := range page.PerInstance {
			if ib != nil { // a null member (not one the server sends) would break Dependency's contract
				all = append(all, ib)
			}
		}
		if page.Next == "" || page.Next == cursor {
			page.PerInstance = all
			return page.Dependency, nil
		}
		cursor = page.Next
	}
}

// latencyText prints a latency as the dashboard does, "-" for none.
func latencyText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return wording.Latency(d)
}

// sinceText is "10:02:11 UTC (3m12s)", as the tile says it, "-" for zero.
func sinceText(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.TimeOnly) + " UTC (" + wording.Span(now.Sub(t)) + ")"
}

type commandOptions struct {
	clientOptions
	Reason   string
	Instance string
	Share    float64
	Wait     time.Duration
}

// newCommandCmd makes release and reset, which stay commands (force open
// and force closed are holds: newHoldCmd). Both require --reason, as the
// dashboard does. release takes a hold id too.
func newCommandCmd(use, short, action string) *cobra.Command {
	var o commandOptions
	target := "SERVICE/BREAKER"
	if action == actionRelease {
		target = "SERVICE/BREAKER|HOLD-ID"
	}
	cmd := &cobra.Command{
		Use:   use + " " + target,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byID := action == actionRelease && holdIDPattern.MatchString(args[0])
			var service, breaker string
			if !byID {
				var err error
				if service, breaker, err = parseTarget(args[0]); err != nil {
					return err
				}
			}
			if o.Share < 0 || o.Share > 100 {
				return usageError{fmt.Errorf("--share must be within 0..100 (got %v)", o.Share)}
			}
			if strings.TrimSpace(o.Reason) == "" {
				return usageError{fmt.Errorf("--reason is required for %s: it goes into the audit log", use)}
			}
			c, err := o.client(true)
			if err != nil {
				return err
			}
			if byID {
				return releaseHold(cmd.Context(), c, args[0], o.Reason, o.Wait, cmd.OutOrStdout())
			}
			req := cbdash.CommandRequest{Service: service, Breaker: breaker, Action: action,
				Instance: o.Instance, Share: o.Share, Reason: o.Reason}
			return issue(cmd.Context(), c, req, o.Wait, cmd.OutOrStdout())
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log (required)")
	cmd.Flags().StringVar(&o.Instance, "instance", "", "only this instance (default: all live instances)")
	cmd.Flags().Float64Var(&o.Share, "share", 0, "only this percentage of the live instances, by a stable hash of the instance id (0 or 100 = all)")
	cmd.Flags().DurationVar(&o.Wait, "wait", 5*time.Second, "how long to wait for the instances to confirm (0 = do not wait)")
	return cmd
}

// issue posts the command, then polls it until no target is pending or
// wait has passed, and prints each instance's answer.
func issue(ctx context.Context, c *apiClient, req cbdash.CommandRequest, wait time.Duration, w io.Writer) error {
	var cmd cbdash.Command
	if err := c.do(ctx, "POST", "/api/v1/commands", req, &cmd); err != nil {
		return err
	}
	deadline := time.Now().Add(wait) // real time: the CLI is a client polling the server
	for pending(cmd) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if err := c.do(ctx, "GET", "/api/v1/commands/"+url.PathEscape(cmd.ID), nil, &cmd); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "%s %s/%s: command %s, %d instance(s)\n", actionWords(cmd.Action), clean(cmd.Service), clean(cmd.Breaker), clean(cmd.ID), len(cmd.Targets))
	if cmd.HoldID != "" {
		fmt.Fprintf(w, "it ended hold %s (cbdash holds report %s)\n", clean(cmd.HoldID), clean(cmd.HoldID))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	failed := 0
	for _, t := range cmd.Targets {
		detail := t.State
		if t.Error != "" {
			detail = t.Error
			failed++
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", clean(t.Instance), t.Status, clean(detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d instance(s) could not apply the command", failed)
	}
	return nil
}

func pending(cmd cbdash.Command) bool {
	for _, t := range cmd.Targets {
		if t.Status == cbdash.TargetPending {
			return true
		}
	}
	return false
}
