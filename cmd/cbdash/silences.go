package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/alert"
)

// newAlertsSilenceCmd is `cbdash alerts silence`: create a silence.
func newAlertsSilenceCmd() *cobra.Command {
	var o clientOptions
	var req alert.SilenceRequest
	var labels []string
	cmd := &cobra.Command{
		Use:   "silence",
		Short: "Silence the notifications of matching alerts until a time (operator role)",
		Long: `Create a silence: until it ends, the alerts it matches keep firing on the
page and in the API but their webhooks are not called (the delivery log says
which silence held each back); an alert still firing when the silence ends is
sent then. Match on --service, --breaker and --label key=value (at least one);
give the end as --for 2h or --until 2030-01-01T15:00:00Z, and a --reason.
You are recorded as its creator.`,
		Example: `  cbdash alerts silence --service checkout --breaker payments --for 2h --reason "payments failover drill"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(req.Reason) == "" {
				return usageError{fmt.Errorf("--reason is required (say why, for whoever is paged next)")}
			}
			if req.For == "" && req.EndsAt == "" {
				return usageError{fmt.Errorf("give the silence's end: --for 2h or --until 2030-01-01T15:00:00Z (RFC 3339)")}
			}
			m, err := labelMap(labels)
			if err != nil {
				return err
			}
			req.Matchers.Labels = m
			c, err := o.client(true)
			if err != nil {
				return err
			}
			var sl cbdash.Silence
			if err := c.do(cmd.Context(), "POST", "/api/v1/alerts/silences", req, &sl); err != nil {
				return err
			}
			if _, err = fmt.Fprintf(cmd.OutOrStdout(), "created silence %d of %s until %s UTC\n", sl.ID, clean(matchersText(sl.Matchers)),
				sl.EndsAt.UTC().Format(time.DateTime)); err != nil {
				return err
			}
			warnUnmatched(cmd.Context(), c, sl, cmd.ErrOrStderr())
			return nil
		},
	}
	o.bind(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&req.Matchers.Service, "service", "", "match alerts of this service")
	fs.StringVar(&req.Matchers.Breaker, "breaker", "", "match alerts of this breaker")
	fs.StringArrayVar(&labels, "label", nil, "match dependencies with this label, key=value (repeatable)")
	fs.StringVar(&req.For, "for", "", "how long from now, a duration like 2h")
	fs.StringVar(&req.EndsAt, "until", "", "when it ends, RFC 3339 (instead of --for)")
	fs.StringVar(&req.Reason, "reason", "", "why (required)")
	return cmd
}

func labelMap(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--label %q: want key=value", kv)}
		}
		m[k] = v
	}
	return m, nil
}

// newAlertsSilencesCmd is `cbdash alerts silences`: list them.
func newAlertsSilencesCmd() *cobra.Command {
	var o clientOptions
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "silences",
		Short: "List the silences active now or later (--all: every one, with who made and expired it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client(false)
			if err != nil {
				return err
			}
			var sls []cbdash.Silence
			if err := c.do(cmd.Context(), "GET", "/api/v1/alerts/silences?all="+strconv.FormatBool(all), nil, &sls); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(sls)
			}
			return printSilences(cmd.OutOrStdout(), sls)
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().BoolVar(&all, "all", false, "every silence, ended and expired ones too")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the server's JSON")
	return cmd
}

func matchersText(m cbdash.SilenceMatchers) string {
	var parts []string
	if m.Service != "" {
		parts = append(parts, "service="+m.Service)
	}
	if m.Breaker != "" {
		parts = append(parts, "breaker="+m.Breaker)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
		parts = append(parts, k+"="+m.Labels[k])
	}
	return strings.Join(parts, " ")
}

// printSilences writes one line per silence, times in UTC.
func printSilences(w io.Writer, sls []cbdash.Silence) error {
	if len(sls) == 0 { // a sentence, not a header over nothing
		_, err := fmt.Fprintln(w, "no silence")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SILENCE\tMATCHES\tENDS (UTC)\tBY\tREASON\tEXPIRED")
	for _, sl := range sls {
		expired := ""
		if !sl.ExpiredAt.IsZero() {
			expired = sl.ExpiredAt.UTC().Format(time.DateTime) + " by " + sl.ExpiredBy
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", sl.ID, clean(matchersText(sl.Matchers)), sl.EndsAt.UTC().Format(time.DateTime),
			clean(sl.CreatedBy), clean(sl.Reason), clean(expired))
	}
	return tw.Flush()
}

// newAlertsUnsilenceCmd is `cbdash alerts unsilence ID`: expire one now.
func newAlertsUnsilenceCmd() *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "unsilence SILENCE-ID",
		Short: "End a silence now (operator role); it stays listed with --all",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if id, err := strconv.ParseInt(args[0], 10, 64); err != nil || id <= 0 {
				return usageError{fmt.Errorf("bad silence id %q: a number, as `cbdash alerts silences` lists", args[0])}
			}
			c, err := o.client(true)
			if err != nil {
				return err
			}
			if err := c.do(cmd.Context(), "DELETE", "/api/v1/alerts/silences/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "expired silence %s\n", args[0])
			return err
		},
	}
	o.bind(cmd.Flags())
	return cmd
}

// newAlertsAckCmd is `cbdash alerts ack RULE-ID SUBJECT`.
func newAlertsAckCmd() *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:     "ack RULE-ID SUBJECT",
		Short:   "Acknowledge a firing alert (operator role): shown as yours, no flapping message; its resolve is still sent",
		Example: `  cbdash alerts ack 3 checkout/payments`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usageError{fmt.Errorf("bad rule id %q: a number, as `cbdash alerts` lists", args[0])}
			}
			c, err := o.client(true)
			if err != nil {
				return err
			}
			if err := c.do(cmd.Context(), "POST", "/api/v1/alerts/acks", alert.AckRequest{RuleID: id, Subject: args[1]}, nil); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "acknowledged rule %d on %s\n", id, clean(args[1]))
			return err
		},
	}
	o.bind(cmd.Flags())
	return cmd
}

// warnUnmatched writes a warning to w when silence sl matches no live
// breaker now (a mistyped service, breaker or label): it still holds
// back the alerts of breakers that match later. Nothing is written when
// the live breakers cannot be read.
func warnUnmatched(ctx context.Context, c *apiClient, sl cbdash.Silence, w io.Writer) {
	var deps []cbdash.Dependency
	if c.doOr(ctx, "GET", "/api/v1/dependencies", "/api/v1/breakers", nil, &deps) != nil {
		return
	}
	for _, d := range deps {
		if sl.Matchers.Match(d.DependencyKey.String(), d.Labels) {
			return
		}
	}
	fmt.Fprintf(w, "warning: silence %d (%s) matches no live breaker now (`cbdash status --json` lists them with their labels); "+
		"it still holds back alerts that match before it ends; end it: cbdash alerts unsilence %d\n", sl.ID, clean(matchersText(sl.Matchers)), sl.ID)
}
