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

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clock"
)

// incidentsOptions are the flags of `cbdash incidents`.
type incidentsOptions struct {
	clientOptions
	Open  bool
	Limit int
	JSON  bool
}

// newIncidentsCmd is `cbdash incidents [SERVICE[/BREAKER]]`: the
// incidents, newest first (GET /api/v1/incidents), and `incidents show
// ID` (GET /api/v1/incidents/ID/export.md or export.json). An open
// incident's duration runs to clk's now.
func newIncidentsCmd(clk clock.Clock) *cobra.Command {
	var o incidentsOptions
	cmd := &cobra.Command{
		Use:   "incidents [SERVICE[/BREAKER]]",
		Short: "List the incidents (a dependency's breakers not closed, from the first open to the last close), newest first",
		Long: `List the incidents, newest first: id, dependency, start and end (UTC),
duration, instances, opens and the first trip. Needs the read role (a token,
or a server with --anonymous). ` + "`cbdash incidents show ID`" + ` prints one
incident's summary and timeline.`,
		Example: `  cbdash incidents --open
  cbdash incidents checkout/payments
  cbdash incidents show 48
  cbdash incidents show 48 --export md > incident-48.md`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{"limit": {strconv.Itoa(o.Limit)}}
			if len(args) == 1 {
				service, breaker, isDep := strings.Cut(args[0], "/")
				q.Set("service", service)
				if isDep {
					q.Set("breaker", breaker)
				}
			}
			if o.Open {
				q.Set("open", "true")
			}
			c, err := o.client(false)
			if err != nil {
				return err
			}
			var list []cbdash.Incident
			if err := c.do(cmd.Context(), "GET", "/api/v1/incidents?"+q.Encode(), nil, &list); err != nil {
				return err
			}
			if o.JSON {
				out, err := json.MarshalIndent(list, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), cleanJSON(string(out)))
				return err
			}
			return printIncidents(cmd.OutOrStdout(), list, clk.Now())
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.Open, "open", false, "only the incidents still open")
	cmd.Flags().IntVar(&o.Limit, "limit", 50, "at most this many, newest first")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the server's JSON")
	cmd.AddCommand(newIncidentShowCmd())
	return cmd
}

func newIncidentShowCmd() *cobra.Command {
	var o clientOptions
	var export string
	cmd := &cobra.Command{
		Use:   "show INCIDENT-ID",
		Short: "Print an incident's summary and timeline (--export md: the Markdown export as is; --export json: its JSON)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if id, err := strconv.ParseInt(args[0], 10, 64); err != nil || id <= 0 {
				return usageError{fmt.Errorf("bad incident id %q: a number, as `cbdash incidents` lists", args[0])}
			}
			if export != "" && export != "md" && export != "json" {
				return usageError{fmt.Errorf("--export %q: md or json", export)}
			}
			c, err := o.client(false)
			if err != nil {
				return err
			}
			format := export
			if format == "" {
				format = "md"
			}
			var out []byte
			if err := c.do(cmd.Context(), "GET", "/api/v1/incidents/"+url.PathEscape(args[0])+"/export."+format, nil, &out); err != nil {
				return err
			}
			var text string
			switch export {
			case "json":
				text = cleanJSON(string(out))
			case "md":
				text = cleanText(string(out))
			default:
				text = cleanText(markdownForTerminal(string(out)))
			}
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			_, err = io.WriteString(cmd.OutOrStdout(), text)
			return err
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().StringVar(&export, "export", "", "md (the Markdown export, escapes and all, for a file or a wiki) or json")
	return cmd
}

// printIncidents writes one line per incident, times in UTC.
func printIncidents(w io.Writer, list []cbdash.Incident, now time.Time) error {
	if len(list) == 0 { // a sentence, not a header over nothing
		_, err := fmt.Fprintln(w, "no incident")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INCIDENT\tDEPENDENCY\tSTART (UTC)\tEND (UTC)\tDURATION\tINSTANCES\tOPENS\tFIRST TRIP")
	for _, in := range list {
		end := "open"
		if !in.End.IsZero() {
			end = in.End.UTC().Format(time.TimeOnly)
		}
		first := in.FirstInstance
		if in.FirstCause.Kind != "" {
			first += ": " + in.FirstCause.Kind
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", in.ID, clean(in.DependencyKey.String()), in.Start.UTC().Format(time.DateTime),
			clean(end), in.Duration(now).Round(time.Second), len(in.Instances), in.Opens, clean(first))
	}
	return tw.Flush()
}
