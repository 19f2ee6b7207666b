package web

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPI is the OpenAPI 3 document of the JSON API, served at GET
// /api/v1/openapi.json without authentication (it is documentation; every
// route it describes keeps its own security). Written by hand; the tests
// check it against the router and against real responses.
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) openAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-cache")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, OpenAPI)
}
