package templates

// Alerts is the alerts page: alerts firing now, the rules with their
// editor, and the delivery log.
type Alerts struct {
	Page
	Firing     []FiringRow
	Silences   []SilenceRow
	Rules      []AlertRuleRow
	Deliveries []DeliveryRow
	// Form is the editor: a new rule, or the rule being edited.
	Form AlertForm
	// Notice is the outcome of the last action ("test notification
	// delivered: 200"); Error a refused change.
	Notice, Error string
}

// FiringRow is one alert firing now.
type FiringRow struct {
	Rule, Kind, Subject string
	RuleHref            string
	Since               string // clock time, UTC, to the second
	For                 string // how long it has been firing ("3m")
	SinceMs             int64
	Detail              string
	// Notified says whether its notifications go out: "yes", "silenced
	// by silence 3 until 15:00:00", "acknowledged by otto at 14:02:11".
	Notified string
	Quiet    bool // silenced or acknowledged
	// AckURL, for an operator and an alert not acknowledged yet, is where
	// its acknowledge button posts (with RuleID, Subject and CSRF).
	AckURL string
	RuleID string
	CSRF   string
}

// SilenceRow is one silence active now or later.
type SilenceRow struct {
	ID, Matches, Ends, By, Reason string
	ExpireURL                     string // operators only
}

// AlertRuleRow is one rule in the rules table.
type AlertRuleRow struct {
	ID        string
	Name      string
	Kind      string
	Scope     string // "checkout/payments" or "checkout (every breaker)"
	Params    string // "for 30s, hold 2m"
	Webhook   string // masked for viewers who are not admins
	Format    string
	Enabled   bool
	Firing    int
	EditHref  string
	TestURL   string
	DeleteURL string
	Editing   bool // the rule being edited
}

// AlertForm is the rule editor's fields, as text.
type AlertForm struct {
	Action                                                           string // where the form posts
	Editing                                                          bool   // an existing rule (else a new one)
	ID                                                               string
	Name, Service, Breaker, Kind, For, Margin, Hold, Webhook, Format string
	// Flap and group settings (empty: the defaults).
	FlapCount, FlapWindow, GroupBy, GroupWait, GroupInterval string
	Disabled                                                 bool
	// WebhookHidden: the viewer may not read the rule's webhook URL; an
	// empty field keeps it.
	WebhookHidden bool
	Kinds         []Option
	Formats       []Option
}

// DeliveryRow is one entry of the delivery log.
type DeliveryRow struct {
	At, Rule, Event, Subject, Outcome string
	OK                                bool
}

// AlertsCount is the firing count on the overview's header.
type AlertsCount struct {
	Firing int
	Rules  int
	// Silences is how many silences are active now (each holds back the
	// notifications of the alerts it matches).
	Silences int
}
