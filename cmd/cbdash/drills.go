package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/spf13/cobra"
)

// newDrillsCmd lists the drills, ongoing and past: the force-open holds
// with stop conditions, each with its result (STOPPED with the breach,
// passed, released, ongoing).
func newDrillsCmd() *cobra.Command {
	var o clientOptions
	var limit int
	cmd := &cobra.Command{
		Use:   "drills",
		Short: "List the drills (force opens with stop conditions), ongoing and past, with their result: STOPPED (and why), passed, released; then the scheduled ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client(false)
			if err != nil {
				return err
			}
			var hs []cbdash.HoldRecord
			if err := c.do(cmd.Context(), "GET", fmt.Sprintf("/api/v1/holds?limit=%d", limit), nil, &hs); err != nil {
				return err
			}
			if err := printDrills(cmd.OutOrStdout(), hs, time.Now()); err != nil {
				return err
			}
			// The scheduled ones; a server older than schedules (404) has none.
			var ds []cbdash.DrillSchedule
			var ae *apiError
			if err := c.do(cmd.Context(), "GET", "/api/v1/schedules", nil, &ds); errors.As(err, &ae) && ae.Status == http.StatusNotFound {
				return nil
			} else if err != nil {
				return err
			}
			if len(ds) == 0 {
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return printSchedules(cmd.OutOrStdout(), ds)
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().IntVar(&limit, "limit", 200, "how many of the newest holds to look through")
	return cmd
}

// printDrills writes one line per drill of hs: id, target, start, result
// and, for a stopped one, its breach and the first instances above it.
func printDrills(w io.Writer, hs []cbdash.HoldRecord, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DRILL\tTARGET\tSTART\tRESULT\tSTOP CONDITIONS")
	n := 0
	for _, h := range hs {
		if h.Action != actionForceOpen || len(h.Stops) == 0 {
			continue
		}
		n++
		result := cbdash.DrillResult(h, now)
		switch {
		case h.Breach != nil:
			result = "STOPPED: " + h.ReleaseReason
			if len(h.Breach.Instances) > 0 {
				result += " (first above it: " + strings.Join(h.Breach.Instances, ", ") + ")"
			}
		case result == cbdash.DrillReleased:
			result += " by " + h.ReleasedBy + ": " + h.ReleaseReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", clean(h.ID), clean(h.Selector.String()), h.CreatedAt.Local().Format(time.DateTime),
			clean(result), clean(stopList(h.Stops)))
	}
	if n == 0 {
		fmt.Fprintln(tw, "(no drills: a drill is a trip with --stop-if, or with the server's --stop-if defaults)")
	}
	return tw.Flush()
}
