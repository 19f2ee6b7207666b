package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbdash/cbdash"
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
}

func newStatusCmd() *cobra.Command {
	var o statusOptions
	cmd := &cobra.Command{
		Use:   "status [SERVICE[/BREAKER]]",
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
			return status(cmd.Context(), c, filter, o.JSON, cmd.OutOrStdout())
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the server's JSON")
	return cmd
}

func status(ctx context.Context, c *apiClient, filter string, asJSON bool, w io.Writer) error {
	var deps []cbdash.Dependency
	if filter != "" && strings.Contains(filter, "/") {
		service, breaker, err := parseTarget(filter)
		if err != nil {
			return err
		}
		var d cbdash.Dependency
		if err := c.do(ctx, "GET", "/api/v1/breakers/"+url.PathEscape(service)+"/"+url.PathEscape(breaker), nil, &d); err != nil {
			return err
		}
		deps = []cbdash.Dependency{d}
	} else if err := c.do(ctx, "GET", "/api/v1/breakers?service="+url.QueryEscape(filter), nil, &deps); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(deps)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BREAKER\tSTATE\tINSTANCES\tREQ/S\tFAILURES\tSLOW\tOPENS TODAY\tHELD")
	for _, d := range deps {
		held := "-"
		if d.Held != nil {
			held = actionWords(d.Held.Action) + " by " + d.Held.Actor
			if !d.Held.Until.IsZero() {
				held += " until " + d.Held.Until.Local().Format(time.TimeOnly)
			}
		}
		state := d.State
		if state == "" {
			state = "no live instance"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d (%d stale)\t%.1f\t%.1f%%\t%.1f%%\t%d\t%s\n",
			clean(d.DependencyKey.String()), clean(state), d.Instances, d.Stale, d.RequestRate, d.FailureRate, d.SlowCallRate, d.OpensToday, clean(held))
		if filter != "" && strings.Contains(filter, "/") {
			for _, ib := range d.PerInstance {
				fmt.Fprintf(tw, "  %s\t%s\t\t\t\t\t\t\n", clean(ib.Instance), clean(ib.State))
			}
		}
	}
	return tw.Flush()
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
