// Package e2e holds the end-to-end test of cbdash's Hystrix stream source
// against a real afex/hystrix-go service: its own StreamHandler on
// loopback, its commands failing on a script, read by internal/source into
// a real collector. It is a module of its own so that hystrix-go, a test
// dependency only, stays out of the server's go.mod. (hystrix-go starts
// goroutines it never stops, one per command, so this module has no
// goleak check; internal/source has one.)
package e2e
