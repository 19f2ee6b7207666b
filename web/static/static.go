// Package static embeds the dashboard's assets: its stylesheet, its one
// small script and the vendored htmx and htmx websocket extension (see
// vendor/*/VERSION and LICENSE).
package static

import "embed"

// FS holds app.css, app.js and vendor/; it is read-only and safe for
// concurrent use.
//
//go:embed app.css app.js vendor
var FS embed.FS
