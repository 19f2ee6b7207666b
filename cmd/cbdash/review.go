package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/cbdash/cbdash/internal/tune"
)

// reviewOptions are the flags of `cbdash review`.
type reviewOptions struct {
	clientOptions
	JSON bool
}

// newReviewCmd is `cbdash review [SERVICE/BREAKER]`: is each breaker
// protecting or decorating? (GET /api/v1/review, or one breaker's).
func newReviewCmd() *cobra.Command {
	var o reviewOptions
	cmd := &cobra.Command{
		Use:   "review [SERVICE/BREAKER]",
		Short: "Review breakers from their settings and history: protecting or decorating?",
		Long: `Answer, for one breaker or every live one, from its reported settings and
its last 24 hours of history: does it trip on slow calls, ignore business
errors, is it one breaker per dependency, does its fallback serve when it
is open, does it judge a rate over a window with a minimum of calls, is it
visible (reporting now), is its threshold above its everyday failure rate.
Each "no" says what to change. Needs the read role.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runReview(cmd, o, args) },
	}
	o.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the server's JSON")
	return cmd
}

func runReview(cmd *cobra.Command, o reviewOptions, args []string) error {
	path := "/api/v1/review"
	if len(args) == 1 {
		svc, br, err := parseTarget(args[0])
		if err != nil {
			return err
		}
		path = "/api/v1/breakers/" + url.PathEscape(svc) + "/" + url.PathEscape(br) + "/review"
	}
	c, err := o.client(false)
	if err != nil {
		return err
	}
	var rs []tune.BreakerReview
	if len(args) == 1 {
		var one tune.BreakerReview
		err = c.do(cmd.Context(), "GET", path, nil, &one)
		rs = append(rs, one)
	} else {
		err = c.do(cmd.Context(), "GET", path, nil, &rs)
	}
	if err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rs)
	}
	for _, r := range rs {
		printReview(cmd.OutOrStdout(), r)
	}
	return nil
}

// printReview prints one review: a heading, then one line per question,
// and under each "no" what to change.
func printReview(w io.Writer, r tune.BreakerReview) {
	fmt.Fprintf(w, "%s/%s (%s)\n", r.Service, r.Breaker, tune.Describe(r.Settings))
	for _, a := range r.Answers {
		fmt.Fprintf(w, "  %-7s %s %s\n", a.Verdict, a.Question, a.Evidence)
		if a.Change != "" {
			fmt.Fprintf(w, "          change: %s\n", a.Change)
		}
	}
	fmt.Fprintln(w)
}
