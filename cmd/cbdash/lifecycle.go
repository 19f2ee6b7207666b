package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/store"
)

// onDB runs fn on the database of o, closing it afterwards.
func onDB(cmd *cobra.Command, o dbOptions, fn func(ctx context.Context, st *store.Store, w io.Writer) error) error {
	st, err := o.open(cmd.Context())
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(cmd.Context(), st, cmd.OutOrStdout())
}

// friendly rewords the store's errors for the command line.
func friendly(err error, what string) error {
	switch {
	case errors.Is(err, cbdash.ErrNotFound):
		return fmt.Errorf("no %s (cbdash user list / cbdash token list show what there is)", what)
	case errors.Is(err, cbdash.ErrConflict), errors.Is(err, cbdash.ErrInvalid):
		return usageError{err}
	}
	return err
}

func stampOrNever(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04")
}

func newUserListCmd() *cobra.Command {
	var o dbOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the dashboard accounts with their role and status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onDB(cmd, o, func(ctx context.Context, st *store.Store, w io.Writer) error {
				users, err := st.Users(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tROLE\tSTATUS\tCREATED (UTC)")
				for _, u := range users {
					status := "enabled"
					if u.Disabled {
						status = "disabled"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", clean(u.Name), u.Role, status, stampOrNever(u.CreatedAt))
				}
				return tw.Flush()
			})
		},
	}
	o.bind(cmd.Flags())
	return cmd
}

// newUserChangeCmds are role, disable, enable and delete: each changes
// one account on the database file and is logged in the account log.
func newUserChangeCmds() []*cobra.Command {
	type change struct {
		use, short string
		args       int
		run        func(ctx context.Context, st *store.Store, args []string) (string, error)
	}
	changes := []change{
		{"role NAME ROLE", "Change an account's role (viewer, operator or admin)", 2, func(ctx context.Context, st *store.Store, a []string) (string, error) {
			return fmt.Sprintf("%s is now %s", a[0], a[1]), st.SetUserRole(ctx, cliActor, a[0], a[1])
		}},
		{"disable NAME", "Disable an account: its sessions end, its API tokens are refused, it cannot log in", 1, func(ctx context.Context, st *store.Store, a []string) (string, error) {
			return "disabled " + a[0], st.SetUserDisabled(ctx, cliActor, a[0], true)
		}},
		{"enable NAME", "Enable a disabled account again (its API tokens work again)", 1, func(ctx context.Context, st *store.Store, a []string) (string, error) {
			return "enabled " + a[0], st.SetUserDisabled(ctx, cliActor, a[0], false)
		}},
		{"delete NAME", "Delete an account with its sessions and API tokens (its commands stay in the audit log)", 1, func(ctx context.Context, st *store.Store, a []string) (string, error) {
			return "deleted " + a[0], st.DeleteUser(ctx, cliActor, a[0])
		}},
	}
	var out []*cobra.Command
	for _, ch := range changes {
		var o dbOptions
		cmd := &cobra.Command{
			Use: ch.use, Short: ch.short,
			Long: ch.short + `.
Works on the server's database file (--db), also while the server runs: the
change takes effect on the account's next request. The last enabled admin
cannot be disabled, demoted or deleted.`,
			Args: cobra.ExactArgs(ch.args),
			RunE: func(cmd *cobra.Command, args []string) error {
				return onDB(cmd, o, func(ctx context.Context, st *store.Store, w io.Writer) error {
					msg, err := ch.run(ctx, st, args)
					if err != nil {
						return friendly(err, fmt.Sprintf("user %q", args[0]))
					}
					fmt.Fprintln(w, msg)
					return nil
				})
			},
		}
		o.bind(cmd.Flags())
		out = append(out, cmd)
	}
	return out
}

func newTokenListCmd() *cobra.Command {
	var o dbOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the API tokens and agent tokens with their last use and expiry",
		Long: `List the API tokens (ut-N) and agent tokens (at-...) with when they were last
used (recorded at most once a minute) and when they expire. The secrets
themselves are not stored and cannot be shown. cbdash token revoke REF ends one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onDB(cmd, o, func(ctx context.Context, st *store.Store, w io.Writer) error {
				users, err := st.AllUserTokens(ctx)
				if err != nil {
					return err
				}
				agents, err := st.AgentTokens(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TOKEN\tFOR\tNAME\tCREATED (UTC)\tLAST USED\tEXPIRES")
				for _, t := range users {
					fmt.Fprintf(tw, "%s\tuser %s\t%s\t%s\t%s\t%s\n", store.UserTokenRef(t.ID), clean(t.User), clean(t.Name),
						stampOrNever(t.CreatedAt), stampOrNever(t.LastUsed), stampOrNever(t.ExpiresAt))
				}
				for _, t := range agents {
					svc := "any service"
					if t.Service != "" {
						svc = "service " + clean(t.Service)
					}
					fmt.Fprintf(tw, "%s\t%s\t-\t%s\t%s\t%s\n", store.AgentTokenRef(t.ID), svc,
						stampOrNever(t.CreatedAt), stampOrNever(t.LastUsed), stampOrNever(t.ExpiresAt))
				}
				return tw.Flush()
			})
		},
	}
	o.bind(cmd.Flags())
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var o dbOptions
	cmd := &cobra.Command{
		Use:   "revoke REF",
		Short: "Revoke an API token (ut-N) or agent token (at-...) as cbdash token list shows it",
		Long: `Revoke a token. Requests with it are refused from now on; a running server
closes the open agent connections of a revoked agent token within a second.
Works on the server's database file (--db), also while the server runs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			agent, agentID, userID, err := store.ParseTokenRef(args[0])
			if err != nil {
				return usageError{err}
			}
			return onDB(cmd, o, func(ctx context.Context, st *store.Store, w io.Writer) error {
				if agent {
					err = st.RevokeAgentToken(ctx, cliActor, agentID)
				} else {
					err = st.RevokeUserToken(ctx, cliActor, userID)
				}
				if err != nil {
					return friendly(err, "token "+args[0])
				}
				fmt.Fprintln(w, "revoked", args[0])
				return nil
			})
		},
	}
	o.bind(cmd.Flags())
	return cmd
}

func newTokenExpireCmd() *cobra.Command {
	var o dbOptions
	var in time.Duration
	var never bool
	cmd := &cobra.Command{
		Use:   "expire REF --in DURATION | --never",
		Short: "Set when a token stops working",
		Long: `Set when an API token (ut-N) or agent token (at-...) stops working: --in 0
ends it now, --in 30d in thirty days, --never removes its expiry.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if never == cmd.Flags().Changed("in") {
				return usageError{errors.New("give exactly one of --in or --never")}
			}
			agent, agentID, userID, err := store.ParseTokenRef(args[0])
			if err != nil {
				return usageError{err}
			}
			var at time.Time
			if !never {
				at = time.Now().Add(in)
			}
			return onDB(cmd, o, func(ctx context.Context, st *store.Store, w io.Writer) error {
				if agent {
					err = st.ExpireAgentToken(ctx, cliActor, agentID, at)
				} else {
					err = st.ExpireUserToken(ctx, cliActor, userID, at)
				}
				if err != nil {
					return friendly(err, "token "+args[0])
				}
				fmt.Fprintf(w, "%s expires %s\n", args[0], stampOrNever(at))
				return nil
			})
		},
	}
	o.bind(cmd.Flags())
	cmd.Flags().Var(dayDuration{&in}, "in", "the token stops working after this long (0 = now; e.g. 24h, 30d)")
	cmd.Flags().BoolVar(&never, "never", false, "the token does not expire")
	return cmd
}
