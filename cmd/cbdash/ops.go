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
			held = d.Held.Action + " by " + d.Held.Actor
			if !d.Held.Until.IsZero() {
				held += " until " + d.Held.Until.Local().Format(time.TimeOnly)
			}
		}
		state := d.State
		if state == "" {
			state = "no live instance"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d (%d stale)\t%.1f\t%.1f%%\t%.1f%%\t%d\t%s\n",
			d.DependencyKey, state, d.Instances, d.Stale, d.RequestRate, d.FailureRate, d.SlowCallRate, d.OpensToday, held)
		if filter != "" && strings.Contains(filter, "/") {
			for _, ib := range d.PerInstance {
				fmt.Fprintf(tw, "  %s\t%s\t\t\t\t\t\t\n", ib.Instance, ib.State)
			}
		}
	}
	return tw.Flush()
}

type commandOptions struct {
	clientOptions
	For      time.Duration
	Reason   string
	Instance string
	Share    float64
	Wait     time.Duration
}

// newCommandCmd makes one of the operator commands (trip, hold-closed,
// release, reset): they differ only in the action they send.
func newCommandCmd(use, short, action string) *cobra.Command {
	var o commandOptions
	forced := action == actionForceOpen || action == actionForceClosed
	cmd := &cobra.Command{
		Use:   use + " SERVICE/BREAKER",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			service, breaker, err := parseTarget(args[0])
			if err != nil {
				return err
			}
			if forced && o.For <= 0 {
				return usageError{fmt.Errorf("--for must be > 0 (got %v): a hold always has an end", o.For)}
			}
			if forced && o.Reason == "" {
				return usageError{fmt.Errorf("--reason is required for %s: it goes into the audit log", use)}
			}
			if o.Share < 0 || o.Share > 100 {
				return usageError{fmt.Errorf("--share must be within 0..100 (got %v)", o.Share)}
			}
			c, err := o.client(true)
			if err != nil {
				return err
			}
			req := cbdash.CommandRequest{Service: service, Breaker: breaker, Action: action,
				Instance: o.Instance, Share: o.Share, Reason: o.Reason}
			if forced {
				req.TTL = o.For
			}
			return issue(cmd.Context(), c, req, o.Wait, cmd.OutOrStdout())
		},
	}
	o.bind(cmd.Flags())
	if forced {
		cmd.Flags().DurationVar(&o.For, "for", 15*time.Minute, "how long the hold lasts before it is released by itself (as on the dashboard)")
	}
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().StringVar(&o.Instance, "instance", "", "only this instance (default: all live instances)")
	cmd.Flags().Float64Var(&o.Share, "share", 0, "only this percentage of the live instances (0 or 100 = all)")
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
	fmt.Fprintf(w, "%s %s/%s: command %s, %d instance(s)\n", cmd.Action, cmd.Service, cmd.Breaker, cmd.ID, len(cmd.Targets))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	failed := 0
	for _, t := range cmd.Targets {
		detail := t.State
		if t.Error != "" {
			detail = t.Error
			failed++
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", t.Instance, t.Status, detail)
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
