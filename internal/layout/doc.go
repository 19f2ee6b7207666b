// Package layout has no code of its own: its tests hold the tree to the
// shape docs/scaling.md and ../shared/LAYOUT.md describe, so that a
// change that would undo it fails in `make test` rather than in a review:
//
//   - no function of the packages listed in shortFuncs is over 60 lines
//     (cyclomatic complexity over 15 is `make check-shape`'s, with
//     gocyclo);
//   - a package imports only what its room allows (deps);
//   - internal/web finds no service by type assertion: each is a typed
//     field of web.Config, wired in cmd/cbdash.
package layout
