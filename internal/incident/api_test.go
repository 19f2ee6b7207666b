package incident_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/incident"
	"github.com/cbdash/cbdash/sdk/breaker/breakertest"
)

// errorHandler maps the cbdash sentinels like the web package's handler.
func errorHandler(err error, c echo.Context) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, cbdash.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, cbdash.ErrInvalid):
		status = http.StatusBadRequest
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		status = he.Code
	}
	_ = c.JSON(status, map[string]string{"error": err.Error()})
}

func serve(t *testing.T, e *echo.Echo) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(e)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestAPI(t *testing.T) {
	ctx := context.Background()
	run := loadRun(t, "fault-run.json")
	st := openStore(t)
	run.record(t, st)
	k := cbdash.DependencyKey{Service: run.Service, Breaker: run.Breaker}
	first, err := st.CreateIncident(ctx, cbdash.Incident{DependencyKey: k, Start: t0.Add(12 * time.Second), End: t0.Add(61 * time.Second),
		Instances: []string{"a", "b"}, Opens: 5, FirstInstance: "a"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := st.CreateIncident(ctx, cbdash.Incident{DependencyKey: k, Start: t0.Add(300 * time.Second), Open: true, Instances: []string{"c"}, Opens: 1, FirstInstance: "c"})
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(310 * time.Second)
	e := echo.New()
	e.HTTPErrorHandler = errorHandler
	incident.NewAPI(st, breakertest.NewClock(now), func(echo.Context) string { return "ann" }).Mount(e, nil, nil)
	base := serve(t, e)

	t.Run("lists with filters, newest first", func(t *testing.T) {
		for _, tt := range []struct {
			query string
			want  []int64
		}{
			{"", []int64{second, first}},
			{"?open=true", []int64{second}},
			{"?service=checkout&breaker=payments&to=" + t0.Add(time.Minute).Format(time.RFC3339), []int64{first}},
			{"?from=" + itoa(t0.Add(200*time.Second).UnixMilli()), []int64{second}},
			{"?service=search", nil},
		} {
			code, body, _ := get(t, base+"/api/v1/incidents"+tt.query)
			var list []cbdash.Incident
			if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
				t.Fatalf("%s: %d %s", tt.query, code, body)
			}
			var ids []int64
			for _, i := range list {
				ids = append(ids, i.ID)
			}
			if len(ids) != len(tt.want) || (len(ids) > 0 && ids[0] != tt.want[0]) {
				t.Errorf("%s: ids %v, want %v", tt.query, ids, tt.want)
			}
		}
		for _, bad := range []string{"?from=yesterday", "?open=maybe", "?limit=-1"} {
			if code, _, _ := get(t, base+"/api/v1/incidents"+bad); code != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", bad, code)
			}
		}
	})
	t.Run("a note by the request's user shows in the report and the export", func(t *testing.T) {
		resp, err := http.Post(base+"/api/v1/incidents/"+itoa(first)+"/notes", "application/json", strings.NewReader(`{"text":"rolled back payments"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("add note: %d", resp.StatusCode)
		}
		code, body, _ := get(t, base+"/api/v1/incidents/"+itoa(first))
		var rep incident.Report
		if code != 200 || json.Unmarshal([]byte(body), &rep) != nil {
			t.Fatalf("get: %d %s", code, body)
		}
		if len(rep.Incident.Notes) != 1 || rep.Incident.Notes[0].Author != "ann" || rep.Summary.Duration != 49*time.Second || len(rep.Lanes) != 3 {
			t.Errorf("report: notes %+v, summary %+v, %d lanes", rep.Incident.Notes, rep.Summary, len(rep.Lanes))
		}
		code, md, h := get(t, base+"/api/v1/incidents/"+itoa(first)+"/export.md")
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/markdown") || !strings.Contains(md, "| note by ann: rolled back payments |") ||
			!strings.Contains(md, "| Duration | 49s |") {
			t.Errorf("export.md: %d %s\n%s", code, h.Get("Content-Type"), md)
		}
		code, js, _ := get(t, base+"/api/v1/incidents/"+itoa(first)+"/export.json")
		var exp incident.Report
		if code != 200 || json.Unmarshal([]byte(js), &exp) != nil || exp.Incident.ID != first || len(exp.Timeline) == 0 {
			t.Errorf("export.json: %d", code)
		}
	})
	t.Run("an open incident lasts until now", func(t *testing.T) {
		_, body, _ := get(t, base+"/api/v1/incidents/"+itoa(second))
		var rep incident.Report
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatal(err)
		}
		if !rep.Summary.Open || rep.Summary.Duration != 10*time.Second || !rep.To.Equal(now) {
			t.Errorf("summary %+v to %s", rep.Summary, rep.To)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, path := range []string{"/api/v1/incidents/999", "/api/v1/incidents/x/export.md", "/api/v1/incidents/999/export.json"} {
			if code, _, _ := get(t, base+path); code != http.StatusNotFound {
				t.Errorf("%s: %d, want 404", path, code)
			}
		}
		for _, body := range []string{`{"text":"   "}`, `{"text":`} {
			resp, err := http.Post(base+"/api/v1/incidents/"+itoa(first)+"/notes", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("note %s: %d, want 400", body, resp.StatusCode)
			}
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
