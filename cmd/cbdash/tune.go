package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cbdash/cbdash/internal/tune"
)

// tuneOptions are the flags of `cbdash tune`.
type tuneOptions struct {
	clientOptions
	From, To   string
	Candidates []string
	Grid       string
	JSON       bool
}

// newTuneCmd is `cbdash tune SERVICE/BREAKER`: the replay of the
// dependency's recorded traffic under its live settings and candidates
// (GET /api/v1/breakers/{service}/{breaker}/replay), as a table.
func newTuneCmd() *cobra.Command {
	var o tuneOptions
	cmd := &cobra.Command{
		Use:   "tune SERVICE/BREAKER",
		Short: "Replay a breaker's recorded traffic under its live settings and candidates, and compare",
		Long: `Replay the dependency's per-second history (at most 24 h, within the
seconds the server keeps) through the real sdk/breaker, as a typical
instance, with the live settings and with each --candidate, and print per
run: trips, time open, calls rejected, calls into a failing dependency
(failures and timeouts admitted), seconds from the failure rate rising to
the trip, flaps (a trip within 5 minutes of a close) and likely false trips
(outside every failing episode). --grid sweeps every combination and marks
with * the runs no other beats on both calls into a failing dependency and
false trips. Candidate keys: ` + tune.CandidateKeys + `.
--from and --to take RFC 3339, Unix milliseconds, or a duration ago (1h).
Needs the read role.`,
		Example: `  cbdash tune checkout/payments --from 1h --candidate failure-rate=40,minimum-calls=20
  cbdash tune checkout/payments --from 2h --grid 'failure-rate=30|50|70,window=50|100,open=10s|30s'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runTune(cmd, o, args[0]) },
	}
	o.bind(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&o.From, "from", "1h", "start of the range: RFC 3339, Unix ms or a duration ago")
	f.StringVar(&o.To, "to", "", "end of the range (default now)")
	f.StringArrayVar(&o.Candidates, "candidate", nil, "candidate settings KEY=VALUE,... (repeatable)")
	f.StringVar(&o.Grid, "grid", "", "a sweep: KEY=V1|V2,... every combination replayed")
	f.BoolVar(&o.JSON, "json", false, "print the server's JSON")
	return cmd
}

func runTune(cmd *cobra.Command, o tuneOptions, target string) error {
	svc, br, err := parseTarget(target)
	if err != nil {
		return err
	}
	q, err := tuneQuery(o, time.Now())
	if err != nil {
		return err
	}
	if o.Grid != "" {
		o.Timeout = max(o.Timeout, time.Minute) // a sweep takes its time (the server's budget is 30 s)
	}
	c, err := o.client(false)
	if err != nil {
		return err
	}
	var rep tune.Report
	path := "/api/v1/breakers/" + url.PathEscape(svc) + "/" + url.PathEscape(br) + "/replay?" + q.Encode()
	if err := c.do(cmd.Context(), "GET", path, nil, &rep); err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printReplay(cmd.OutOrStdout(), rep)
}

// tuneQuery is the replay's query string from o, durations ago taken
// from now.
func tuneQuery(o tuneOptions, now time.Time) (url.Values, error) {
	q := url.Values{}
	for name, v := range map[string]string{"from": o.From, "to": o.To} {
		if v == "" {
			continue
		}
		if d, err := time.ParseDuration(v); err == nil {
			v = strconv.FormatInt(now.Add(-d).UnixMilli(), 10)
		}
		q.Set(name, v)
	}
	for _, c := range o.Candidates {
		q.Add("candidate", c)
	}
	if o.Grid != "" {
		q.Set("grid", o.Grid)
	}
	return q, nil
}

// printReplay prints rep as a table, one run a line, then its notes.
func printReplay(w io.Writer, rep tune.Report) error {
	fmt.Fprintf(w, "%s/%s, %s to %s: %d s replayed as one of %.1f instances, normal failure rate %.1f%% (lower quartile over 10 s, rejected calls counted at the probes' failure rate), %d failing episodes\n\n",
		rep.Service, rep.Breaker, rep.From.UTC().Format(time.RFC3339), rep.To.UTC().Format(time.RFC3339),
		rep.Seconds, rep.Instances, rep.NormalRate, len(rep.Episodes))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSETTINGS\tTRIPS\tOPEN\tREJECTED\tINTO FAILING\tDETECT\tFLAPS\tFALSE TRIPS")
	for _, r := range rep.Runs {
		fmt.Fprintln(tw, replayRow(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Estimated) > 0 {
		fmt.Fprintf(w, "\nestimated: %d spans (the live breakers were open; their rejected calls are filled)\n", len(rep.Estimated))
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// replayRow is one run's line of the table.
func replayRow(r tune.Run) string {
	label := r.Label
	if r.Pareto {
		label = "* " + label
	}
	if r.Err != "" {
		return fmt.Sprintf("%s\t%s\t(not replayed: %s)", label, tune.Describe(r.Settings), r.Err)
	}
	detect := "-"
	if r.DetectSeconds >= 0 {
		detect = fmt.Sprintf("%.1fs", r.DetectSeconds)
	}
	open := (time.Duration(r.OpenSeconds) * time.Second).String()
	trips := strconv.Itoa(r.Trips)
	if r.RecordedTrips != nil { // a shadow's run: its would-be trips as recorded live
		trips += " (recorded " + strconv.Itoa(*r.RecordedTrips) + ")"
	}
	return strings.Join([]string{label, tune.Describe(r.Settings), trips, open, strconv.FormatInt(r.Rejected, 10),
		strconv.FormatInt(r.IntoFailing, 10), detect, strconv.Itoa(r.Flaps), strconv.Itoa(r.FalseTrips)}, "\t")
}
