// Package e2e holds the end-to-end test of several collectors over one
// PostgreSQL database: two `cbdash serve` processes, agents split across
// them, one killed with SIGKILL while they stream. It has no code of its
// own outside the test.
package e2e
