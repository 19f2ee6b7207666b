package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/spf13/cobra"
)

// newDrillCmd groups the drill schedule commands: schedule, schedules,
// unschedule.
func newDrillCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Scheduled drills: schedule one (once or every week), list them with their next and last runs, unschedule one",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newDrillScheduleCmd(), newDrillSchedulesCmd(), newDrillUnscheduleCmd())
	return cmd
}

// scheduleRule reads --at or --every (exactly one) as a rule.
func scheduleRule(at, every string) (cbdash.ScheduleRule, error) {
	var s string
	switch {
	case (at == "") == (every == ""):
		return cbdash.ScheduleRule{}, usageError{errors.New("give --at TIME (once) or --every 'DAYS HH:MM' (every week, UTC)")}
	case at != "":
		s = "at " + at
	default:
		s = "every " + every
	}
	r, err := cbdash.ParseScheduleRule(s)
	if err != nil {
		return r, usageError{err}
	}
	return r, nil
}

// newDrillScheduleCmd schedules a drill: the trip flags, and when.
func newDrillScheduleCmd() *cobra.Command {
	var o holdOptions
	var at, every string
	cmd := &cobra.Command{
		Use:   "schedule SERVICE/BREAKER|*/BREAKER (--at TIME | --every 'DAYS HH:MM')",
		Short: "Schedule a drill (a force open, as cbdash trip takes it) once or every week (UTC); pre-flight runs at each due time and a refused run is skipped with the reason",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, err := parseSelectorArg(args[0])
			if err != nil {
				return err
			}
			sel.Labels, sel.Instances, sel.Share = o.Labels, o.Instances, o.Share
			rule, err := scheduleRule(at, every)
			if err != nil {
				return err
			}
			if o.For <= 0 {
				return usageError{fmt.Errorf("--for must be > 0 (got %v): each drill ends by itself", o.For)}
			}
			if strings.TrimSpace(o.Reason) == "" {
				return usageError{errors.New("--reason is required to schedule a drill: it goes into the audit log")}
			}
			req := cbdash.ScheduleRequest{Rule: rule, HoldRequest: cbdash.HoldRequest{Selector: sel, Action: actionForceOpen, TTL: o.For, Reason: o.Reason}}
			if err := o.drill(&req.HoldRequest); err != nil {
				return err
			}
			c, err := o.client(true)
			if err != nil {
				return err
			}
			var d cbdash.DrillSchedule
			if err := c.do(cmd.Context(), "POST", "/api/v1/schedules", req, &d); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "scheduled drill %s: force open %s for %v, %s; next run %s\n", clean(d.ID), clean(d.Selector.String()), d.TTL,
				clean(d.Rule.String()), runTime(d.NextRun))
			fmt.Fprintf(w, "list them: cbdash drill schedules; delete it: cbdash drill unschedule %s --reason ...\n", clean(d.ID))
			return nil
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().StringVar(&at, "at", "", "run once at this time (RFC 3339: 2026-12-08T10:00:00Z)")
	cmd.Flags().StringVar(&every, "every", "", "run every week on these days at this time of day, UTC: 'tue 10:00', 'mon,thu 06:30', 'day 23:15'")
	cmd.Flags().DurationVar(&o.For, "for", 10*time.Minute, "how long each drill lasts (from its due time)")
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log (required)")
	cmd.Flags().StringToStringVar(&o.Labels, "label", nil, "only instances with this label, KEY=VALUE (repeatable: all must match)")
	cmd.Flags().StringArrayVar(&o.Instances, "instance", nil, "only this instance (repeatable)")
	cmd.Flags().Float64Var(&o.Share, "share", 0, "only this percent of the instances, chosen by a stable hash of the instance id (0 or 100 = all)")
	cmd.Flags().StringArrayVar(&o.StopIf, "stop-if", nil, "as cbdash trip --stop-if (repeatable)")
	cmd.Flags().StringArrayVar(&o.DropStops, "drop-stop-if", nil, "as cbdash trip --drop-stop-if (repeatable; needs --drop-reason)")
	cmd.Flags().StringVar(&o.DropWhy, "drop-reason", "", "why the default stop conditions are dropped, for the audit log")
	cmd.Flags().StringVar(&o.Steps, "steps", "", "as cbdash trip --steps: 5%:1m,25%:2m,100%:5m")
	return cmd
}

// newDrillSchedulesCmd lists the schedules with their next and last runs.
func newDrillSchedulesCmd() *cobra.Command {
	var o clientOptions
	var deleted bool
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List the drill schedules with their next run and last run (started as which hold, or skipped and why)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client(false)
			if err != nil {
				return err
			}
			var ds []cbdash.DrillSchedule
			path := "/api/v1/schedules"
			if deleted {
				path += "?deleted=true"
			}
			if err := c.do(cmd.Context(), "GET", path, nil, &ds); err != nil {
				return err
			}
			return printSchedules(cmd.OutOrStdout(), ds)
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().BoolVar(&deleted, "deleted", false, "deleted schedules too (who deleted each and why)")
	return cmd
}

// printSchedules writes one line per schedule: id, target, rule,
// duration, next run, last run.
func printSchedules(w io.Writer, ds []cbdash.DrillSchedule) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tTARGET\tRULE (UTC)\tFOR\tNEXT RUN\tLAST RUN\tBY")
	for _, d := range ds {
		next := runTime(d.NextRun)
		if !d.DeletedAt.IsZero() {
			next = "deleted " + d.DeletedAt.UTC().Format(time.DateTime) + " by " + d.DeletedBy + ": " + d.DeleteReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\n", clean(d.ID), clean(d.Selector.String()), clean(d.Rule.String()), d.TTL,
			clean(next), clean(lastRun(d.Runs)), clean(d.Actor))
	}
	if len(ds) == 0 {
		fmt.Fprintln(tw, "(no drill schedules: cbdash drill schedule SERVICE/BREAKER --every 'tue 10:00' --for 10m --reason ...)")
	}
	return tw.Flush()
}

// runTime is a due time in UTC, or "none".
func runTime(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format("Mon 2006-01-02 15:04 UTC")
}

// lastRun says how a schedule's last run went (cbdash.ScheduleRun.Text:
// which collector took it over, when one did).
func lastRun(runs []cbdash.ScheduleRun) string {
	if len(runs) == 0 {
		return "never"
	}
	return runs[0].Text()
}

// newDrillUnscheduleCmd deletes a schedule (it is kept, with who and why).
func newDrillUnscheduleCmd() *cobra.Command {
	var o clientOptions
	var reason string
	cmd := &cobra.Command{
		Use:   "unschedule SCHEDULE-ID --reason ...",
		Short: "Delete a drill schedule: it runs no more (a drill it started goes on: cbdash release HOLD-ID ends it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageError{errors.New("--reason is required to delete a schedule: it goes into the audit log")}
			}
			c, err := o.client(true)
			if err != nil {
				return err
			}
			var d cbdash.DrillSchedule
			path := "/api/v1/schedules/" + url.PathEscape(args[0]) + "?reason=" + url.QueryEscape(reason)
			if err := c.do(cmd.Context(), http.MethodDelete, path, nil, &d); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted drill schedule %s (%s, %s) by %s: %s\n", clean(d.ID), clean(d.Selector.String()),
				clean(d.Rule.String()), clean(d.DeletedBy), clean(d.DeleteReason))
			return nil
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log (required)")
	return cmd
}
