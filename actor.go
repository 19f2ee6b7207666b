package cbdash

// ActorKind says how an actor came to act: through the dashboard, with an
// API token, from the command line on the server's machine, as an agent,
// or as the server itself (a scripted drill, an expiry).
type ActorKind string

// Actor kinds.
const (
	ActorUser   ActorKind = "user"      // a dashboard session
	ActorToken  ActorKind = "api token" // a user API token (the CLI over HTTP, scripts)
	ActorCLI    ActorKind = "cli"       // the command line working on the database file
	ActorAgent  ActorKind = "agent"     // an agent token
	ActorSystem ActorKind = "system"    // the server itself
)

// Actor is who performs an audited action (a command, a hold, its
// release, an incident note): the domain methods that change state take
// one explicitly and record its Name in the audit log. Role is the
// actor's role (RoleViewer, RoleOperator, RoleAdmin; "" when none
// applies, as for an agent or the system). The zero Actor is nobody; the
// methods that record an actor refuse it with ErrInvalid.
type Actor struct {
	Name string
	Role string
	Kind ActorKind
}

// UserActor is the actor of user u acting through kind (ActorUser for a
// session, ActorToken for an API token).
func UserActor(u User, kind ActorKind) Actor { return Actor{Name: u.Name, Role: u.Role, Kind: kind} }

// String is the actor's name, as the audit log shows it.
func (a Actor) String() string { return a.Name }

// IsZero reports whether a names nobody.
func (a Actor) IsZero() bool { return a.Name == "" }
