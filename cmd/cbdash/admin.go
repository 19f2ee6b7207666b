package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/dsn"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/web"
)

// dbOptions are the flags of the commands that work on the database file
// directly, on the server's machine.
type dbOptions struct {
	DB string
}

func (o *dbOptions) bind(fs *pflag.FlagSet) {
	fs.StringVar(&o.DB, "db", "./cbdash.db", "the server's database: its SQLite file, or its PostgreSQL DSN, postgres://... or host=... dbname=... (env CBDASH_DB)")
}

// open opens an existing database: a mistyped path must not create an
// empty one.
func (o dbOptions) open(ctx context.Context) (*store.Store, error) {
	if err := store.CheckDSN(o.DB); err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	if _, err := os.Stat(o.DB); err != nil && !store.IsPostgres(o.DB) {
		return nil, fmt.Errorf("no database at %s (flag --db or CBDASH_DB): start `cbdash serve` once, or give the server's --db: %w", store.MaskDSN(o.DB), dsn.MaskError(o.DB, err))
	}
	st, err := store.Open(ctx, o.DB, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("opening %s (flag --db or CBDASH_DB): %w", store.MaskDSN(o.DB), err)
	}
	return st, nil
}

type tokenOptions struct {
	dbOptions
	Service string
	User    string
	Name    string
	Expires time.Duration // --expires: 0 = never
}

// cliActor is the account log's actor for changes made with the command
// line on the server's machine (whoever can write the database file).
const cliActor = "cli"

func newTokenCmd() *cobra.Command {
	tok := &cobra.Command{Use: "token", Short: "Make tokens for agents (--service) or for the command line (--user)", Args: cobra.NoArgs}
	var o tokenOptions
	create := &cobra.Command{
		Use:   "create",
		Short: "Make a token and print it (it is stored hashed and never shown again)",
		Long: `Make a token and print it. It is stored hashed in the database and cannot be
shown again.

  cbdash token create --service checkout   an agent token for the instances of one service
  cbdash token create --service '*'        an agent token for any service
  cbdash token create --user alice         an API token for alice, for status/trip/release/reset

Works on the server's database file (--db), also while the server runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (o.Service == "") == (o.User == "") {
				return usageError{errors.New("give exactly one of --service (an agent token) or --user (an API token)")}
			}
			st, err := o.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			token, ref, err := createToken(cmd.Context(), st, o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), token)
			fmt.Fprintf(cmd.ErrOrStderr(), "made %s (cbdash token revoke %s ends it)\n", ref, ref)
			return nil
		},
	}
	o.bind(create.Flags())
	create.Flags().StringVar(&o.Service, "service", "", `agent token for this service ("*" = any service)`)
	create.Flags().StringVar(&o.User, "user", "", "API token for this dashboard user")
	create.Flags().StringVar(&o.Name, "name", "cli", "name of the API token, to recognise it later")
	create.Flags().Var(dayDuration{&o.Expires}, "expires", "the token stops working after this long (e.g. 720h, 90d; default: never)")
	tok.AddCommand(create, newTokenListCmd(), newTokenRevokeCmd(), newTokenExpireCmd())
	return tok
}

func createToken(ctx context.Context, st *store.Store, o tokenOptions) (token, ref string, err error) {
	var until time.Time
	if o.Expires > 0 {
		until = time.Now().Add(o.Expires)
	}
	if o.Service != "" {
		service := o.Service
		if service == "*" {
			service = ""
		}
		return st.IssueAgentToken(ctx, cliActor, service, until)
	}
	u, _, err := st.UserByName(ctx, o.User)
	if errors.Is(err, cbdash.ErrNotFound) {
		return "", "", fmt.Errorf("no user %q (add one with `cbdash user add`)", o.User)
	}
	if err != nil {
		return "", "", err
	}
	return st.IssueUserToken(ctx, cliActor, u.ID, o.Name, until)
}

type userOptions struct {
	dbOptions
	Role     string
	Password string
}

func newUserCmd() *cobra.Command {
	usr := &cobra.Command{Use: "user", Short: "Manage dashboard accounts", Args: cobra.NoArgs}
	var o userOptions
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a dashboard account (viewer, operator or admin)",
		Long: `Add a dashboard account. Without --password a random one is made and printed.
Works on the server's database file (--db), also while the server runs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch o.Role {
			case cbdash.RoleViewer, cbdash.RoleOperator, cbdash.RoleAdmin:
			default:
				return usageError{fmt.Errorf("--role %q: want viewer, operator or admin", o.Role)}
			}
			pw := o.Password
			if pw == "" {
				pw = randomPassword()
			}
			hash, err := web.HashPassword(pw)
			if err != nil {
				return usageError{fmt.Errorf("--password: %w", err)}
			}
			st, err := o.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			if _, err := st.CreateUser(cmd.Context(), args[0], o.Role, hash); err != nil {
				if errors.Is(err, cbdash.ErrConflict) {
					return fmt.Errorf("user %q exists already", args[0])
				}
				return err
			}
			if err := st.RecordAccountEvent(cmd.Context(), cbdash.AccountEvent{Actor: cliActor, Action: cbdash.AccountUserAdd, Subject: args[0], Detail: o.Role}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s (%s)", args[0], o.Role)
			if o.Password == "" {
				fmt.Fprintf(cmd.OutOrStdout(), " with password %s", pw)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	o.bind(add.Flags())
	add.Flags().StringVar(&o.Role, "role", cbdash.RoleViewer, "viewer, operator or admin")
	add.Flags().StringVar(&o.Password, "password", "", "password, 8 to 72 bytes (env CBDASH_PASSWORD; default: random, printed)")
	var po userOptions
	var revokeTokens bool
	passwd := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set a dashboard account's password (and end its sessions)",
		Long: `Set the password of an existing account, for instance the admin account
whose one-time password was lost. Without --password a random one is made
and printed. Works on the server's database file (--db), also while the
server runs; the account's open sessions end. Its API tokens keep working
unless --revoke-tokens is given (do give it when the password leaked).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pw := po.Password
			if pw == "" {
				pw = randomPassword()
			}
			hash, err := web.HashPassword(pw)
			if err != nil {
				return usageError{fmt.Errorf("--password: %w", err)}
			}
			st, err := po.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.SetPassword(cmd.Context(), args[0], hash); err != nil {
				if errors.Is(err, cbdash.ErrNotFound) {
					return fmt.Errorf("no user %q (cbdash user add %s --role ... makes one)", args[0], args[0])
				}
				return err
			}
			if err := st.RecordAccountEvent(cmd.Context(), cbdash.AccountEvent{Actor: cliActor, Action: cbdash.AccountUserPassword, Subject: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "set the password of %s", args[0])
			if po.Password == "" {
				fmt.Fprintf(cmd.OutOrStdout(), " to %s", pw)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if revokeTokens {
				n, err := st.RevokeUserTokens(cmd.Context(), cliActor, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked %d API tokens of %s\n", n, args[0])
			} else if list, err := st.AllUserTokens(cmd.Context()); err == nil {
				n := 0
				for _, t := range list {
					if t.User == args[0] {
						n++
					}
				}
				if n > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s still has %d API tokens; --revoke-tokens ends them (cbdash token list shows them)\n", args[0], n)
				}
			}
			return nil
		},
	}
	po.bind(passwd.Flags())
	passwd.Flags().StringVar(&po.Password, "password", "", "new password, 8 to 72 bytes (env CBDASH_PASSWORD; default: random, printed)")
	passwd.Flags().BoolVar(&revokeTokens, "revoke-tokens", false, "also revoke every API token of the account")
	usr.AddCommand(add, passwd, newUserListCmd())
	usr.AddCommand(newUserChangeCmds()...)
	return usr
}

// randomPassword returns 26 characters of A-Z and 2-7: 130 random bits
// (crypto/rand.Text).
func randomPassword() string {
	return rand.Text()
}
