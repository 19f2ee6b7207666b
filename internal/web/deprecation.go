package web

import "github.com/labstack/echo/v4"

// DeprecatedSince is the Deprecation header (RFC 9745: a Structured Field
// Date, @ and Unix seconds) of the JSON API's deprecated forms:
// 2026-12-04T00:00:00Z, the day API 1.1.0 gave each a successor.
const DeprecatedSince = "@1796342400"

// deprecated marks an answer of a deprecated form of the JSON API (RFC
// 9745): Deprecation: DeprecatedSince, and Links to its successor
// (rel="successor-version") and to the OpenAPI document, whose operation
// says so (rel="deprecation"). No Sunset: within /api/v1 nothing is
// removed (CHANGELOG.md: a change that could break a client gets a new
// version), so the deprecated forms answer as long as /api/v1 does.
func deprecated(c echo.Context, successor string) {
	h := c.Response().Header()
	h.Set("Deprecation", DeprecatedSince)
	h.Add("Link", "<"+successor+`>; rel="successor-version"`)
	h.Add("Link", `</api/v1/openapi.json>; rel="deprecation"; type="application/json"`)
}
