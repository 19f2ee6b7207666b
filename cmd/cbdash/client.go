package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// clientOptions are the flags of the commands that talk to a running
// server.
type clientOptions struct {
	Server  string        // --server: base URL of the server
	Token   string        // --token: a user's API token (Bearer)
	Timeout time.Duration // --timeout: per request
}

func (o *clientOptions) bind(fs *pflag.FlagSet) {
	fs.StringVar(&o.Server, "server", "http://127.0.0.1:8080", "base URL of the cbdash server (env CBDASH_SERVER)")
	fs.StringVar(&o.Token, "token", "", "API token of a dashboard user (env CBDASH_TOKEN)")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "timeout of each request to the server")
}

// apiClient calls the server's JSON API under /api/v1.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

// client checks the options and returns a client. A command that changes
// something needs a token: without one it fails before any request,
// naming the flag and the variable.
func (o clientOptions) client(needToken bool) (*apiClient, error) {
	u, err := url.Parse(o.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("--server %q is not an http(s) URL (flag --server or CBDASH_SERVER)", o.Server)}
	}
	if needToken && o.Token == "" {
		return nil, usageError{errNoToken}
	}
	return &apiClient{
		base:  strings.TrimRight(u.String(), "/"),
		token: o.Token,
		http:  &http.Client{Timeout: o.Timeout},
	}, nil
}

// errNoToken is the error of a command that needs a token and has none,
// or was refused by the server without one.
var errNoToken = errors.New("no API token: set CBDASH_TOKEN or pass --token (an operator's API token: cbdash token create --user NAME on the server, or the admin page of the dashboard)")

// apiError is an error answer of the server. NoToken: the request
// carried no token.
type apiError struct {
	Status  int
	Message string
	NoToken bool
}

func (e *apiError) Error() string {
	if e.NoToken && (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden) {
		// The server's own words (a CSRF token, a role) would mislead:
		// the request had no API token at all.
		return errNoToken.Error()
	}
	switch e.Status {
	case http.StatusUnauthorized:
		return fmt.Sprintf("the server refused the token (%s): give a valid API token with --token or CBDASH_TOKEN", e.Message)
	case http.StatusForbidden:
		return fmt.Sprintf("not allowed (%s): the token's user needs the operator role", e.Message)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// do sends in (if not nil) as JSON and decodes the answer into out (if
// not nil; a *[]byte receives the answer undecoded).
func (c *apiClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cannot reach the cbdash server at %s (flag --server or CBDASH_SERVER): %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
			if e.Error == "" || len(e.Error) > 200 {
				e.Error = http.StatusText(resp.StatusCode)
			}
		}
		return &apiError{Status: resp.StatusCode, Message: clean(e.Error), NoToken: c.token == ""}
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok { // not JSON: the answer as is
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the answer of %s %s is not what this cbdash expects (is --server a cbdash server?): %w", method, path, err)
	}
	return nil
}

// doOr is do on path, or on older when the server has no route for path
// (404 or 405 with the router's bare status text, not a missing hold's
// "not found"): a server of API 1.0.0, from before path was added, where
// older answers the same shape (older is then a form that API 1.1.0
// deprecated).
func (c *apiClient) doOr(ctx context.Context, method, path, older string, in, out any) error {
	err := c.do(ctx, method, path, in, out)
	var ae *apiError
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed) &&
		ae.Message == http.StatusText(ae.Status) {
		return c.do(ctx, method, older, in, out)
	}
	return err
}

// parseTarget splits "SERVICE/BREAKER".
func parseTarget(s string) (service, breaker string, err error) {
	service, breaker, ok := strings.Cut(s, "/")
	if !ok || strings.TrimSpace(service) == "" || strings.TrimSpace(breaker) == "" {
		return "", "", usageError{fmt.Errorf("bad breaker name %q: want SERVICE/BREAKER, for example checkout/payments", s)}
	}
	return service, breaker, nil
}
