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

	"github.com/cbdash/cbdash/internal/alert"
)

// alertsOptions are the flags of `cbdash alerts`.
type alertsOptions struct {
	clientOptions
	JSON bool
}

// newAlertsCmd is `cbdash alerts`: the rules and the alerts firing, and
// subcommands to create and delete rules.
func newAlertsCmd() *cobra.Command {
	var o alertsOptions
	cmd := &cobra.Command{
		Use:   "alerts",
		Short: "List the alert rules and the alerts firing now, with since when",
		Long: `List the alert rules, then the alerts firing now (longest first) with the
moment each started (UTC) and for how long. Needs the read role (a token, or
a server with --anonymous).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client(false)
			if err != nil {
				return err
			}
			var rules []alert.RuleJSON
			if err := c.do(cmd.Context(), "GET", "/api/v1/alerts/rules", nil, &rules); err != nil {
				return err
			}
			var firing []alert.FiringJSON
			if err := c.do(cmd.Context(), "GET", "/api/v1/alerts/firing", nil, &firing); err != nil {
				return err
			}
			if o.JSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"rules": rules, "firing": firing})
			}
			return printAlerts(cmd.OutOrStdout(), rules, firing)
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the server's JSON")
	cmd.AddCommand(newAlertsCreateCmd(), newAlertsDeleteCmd(), newAlertsSilenceCmd(), newAlertsSilencesCmd(), newAlertsUnsilenceCmd(), newAlertsAckCmd())
	return cmd
}

func newAlertsCreateCmd() *cobra.Command {
	var o clientOptions
	var r alert.RuleJSON
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an alert rule (operator role)",
		Long: `Create an alert rule. --service, --kind and --webhook are required.
Kinds: open (the breaker is open or half-open), half_open_long (half-open
longer than --for), headroom (a rate within --margin points of its
threshold), stale (an instance stopped reporting), drill_stopped (a stop
condition ended a drill), fallback_unexercised (the fallback has not
served rejected calls for --for, default 30d, or never since the breaker
is known: schedule a drill).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case strings.TrimSpace(r.Service) == "":
				return usageError{fmt.Errorf("--service is required")}
			case r.Kind == "":
				return usageError{fmt.Errorf("--kind is required (open, half_open_long, headroom, stale, drill_stopped or fallback_unexercised)")}
			case r.WebhookURL == "":
				return usageError{fmt.Errorf("--webhook is required (the URL notifications are posted to)")}
			}
			c, err := o.client(true)
			if err != nil {
				return err
			}
			var created alert.RuleJSON
			if err := c.do(cmd.Context(), "POST", "/api/v1/alerts/rules", r, &created); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "created alert rule %d (%s, %s on %s)\n", created.ID, clean(nameOr(created)), clean(created.Kind), clean(scopeOf(created)))
			return err
		},
	}
	o.bind(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&r.Name, "name", "", "the rule's name, shown in notifications")
	fs.StringVar(&r.Service, "service", "", "the service whose breakers the rule watches, or '*' for every service (required)")
	fs.StringVar(&r.Breaker, "breaker", "", "one breaker of the service (empty = every breaker)")
	fs.StringVar(&r.Kind, "kind", "", "open, half_open_long, headroom, stale, drill_stopped or fallback_unexercised (required)")
	fs.StringVar(&r.WebhookURL, "webhook", "", "the URL notifications are posted to (required)")
	fs.StringVar(&r.Format, "format", "json", "body format: json, slack (an incoming webhook) or pagerduty (Events API v2; the routing key as ?routing_key= in --webhook)")
	fs.IntVar(&r.FlapCount, "flap-count", 0, "open: more opens than this within --flap-window is flapping: one message, then one when it settles (default 5)")
	fs.StringVar(&r.FlapWindow, "flap-window", "", "open: the window of --flap-count (default 10m)")
	fs.StringVar(&r.GroupBy, "group-by", "", "one message per group: breaker (one dependency across services, with --service '*') or service (default: one per alert)")
	fs.StringVar(&r.GroupWait, "group-wait", "", "grouped: how long a new group's first message waits for others (default 10s)")
	fs.StringVar(&r.GroupInterval, "group-interval", "", "grouped: how long after a group's message the next firings of the group wait (default 1m)")
	fs.StringVar(&r.For, "for", "", "half_open_long: how long half-open may last (default 30s); fallback_unexercised: how long a fallback may go without serving (default 30d)")
	fs.Float64Var(&r.Margin, "margin", 0, "headroom: the distance to the threshold in percentage points (default 10)")
	fs.StringVar(&r.Hold, "hold", "", "how long the condition must stay false before the alert resolves (default 2m)")
	fs.BoolVar(&r.Disabled, "disabled", false, "create the rule disabled")
	return cmd
}

func newAlertsDeleteCmd() *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "delete RULE-ID",
		Short: "Delete an alert rule (operator role); its alerts are forgotten without a resolve",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usageError{fmt.Errorf("bad rule id %q: a number, as `cbdash alerts` lists", args[0])}
			}
			c, err := o.client(true)
			if err != nil {
				return err
			}
			if err := c.do(cmd.Context(), "DELETE", "/api/v1/alerts/rules/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "deleted alert rule %d\n", id)
			return err
		},
	}
	o.bind(cmd.Flags())
	return cmd
}

func nameOr(r alert.RuleJSON) string {
	if r.Name != "" {
		return r.Name
	}
	return "rule " + strconv.FormatInt(r.ID, 10)
}

func scopeOf(r alert.RuleJSON) string {
	if r.Breaker == "" {
		return r.Service + " (every breaker)"
	}
	return r.Service + "/" + r.Breaker
}

// printAlerts writes the rules table, then the alerts firing, each
// under a title; an empty table is a sentence, not a header over nothing.
func printAlerts(w io.Writer, rules []alert.RuleJSON, firing []alert.FiringJSON) error {
	if err := printRules(w, rules); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(firing) == 0 {
		_, err := fmt.Fprintln(w, "no alert firing")
		return err
	}
	fmt.Fprintln(w, "Alerts firing now:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tNAME\tSUBJECT\tSINCE (UTC)\tFOR\tNOTIFIED\tDETAIL")
	for _, f := range firing {
		since := time.UnixMilli(f.SinceMs).UTC()
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", f.RuleID, clean(f.Rule), clean(f.Subject), since.Format(time.DateTime),
			f.For, clean(notified(f)), clean(f.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "acknowledge one: cbdash alerts ack RULE SUBJECT; silence: cbdash alerts silence --service ... --for 1h --reason ...")
	return err
}

// printRules writes the rules table, or a sentence when there is none.
func printRules(w io.Writer, rules []alert.RuleJSON) error {
	if len(rules) == 0 {
		_, err := fmt.Fprintln(w, "no alert rule (cbdash alerts create)")
		return err
	}
	fmt.Fprintln(w, "Alert rules:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tNAME\tKIND\tWATCHES\tHOLD\tFORMAT\tSTATUS\tFIRING")
	for _, r := range rules {
		status := "enabled"
		if r.Disabled {
			status = "disabled"
		}
		hold := r.Hold
		if hold == "" {
			hold = "2m (default)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.ID, clean(nameOr(r)), clean(r.Kind), clean(scopeOf(r)), clean(hold), clean(r.Format), status, len(r.Firing))
	}
	return tw.Flush()
}

// notified says whether f's notifications go out: "yes", "silenced
// (silence N)", "acked by NAME".
func notified(f alert.FiringJSON) string {
	out := "yes"
	if f.Silenced != 0 {
		out = fmt.Sprintf("silenced (silence %d)", f.Silenced)
	}
	if f.AckedBy != "" {
		out += ", acked by " + f.AckedBy
	}
	return out
}
