//go:build !go1.27

package main

// cbdash is built with Go 1.27.3 or later: go1.26's standard library has
// known vulnerabilities (one lets an outsider crash a server started with
// --tls-cert). The Makefile and .ci/run set GOTOOLCHAIN=go1.27.3, and
// go.mod's toolchain line asks for it, but a Go installed with
// GOTOOLCHAIN=local ignores that line: on such a Go this file is built and
// the build fails, naming the fix. (A build tag knows no patch level:
// `make check` reads the exact version back from the binary.)
var _ = run_export_GOTOOLCHAIN_go1_27_3_cbdash_needs_Go_1_27_3_or_later
