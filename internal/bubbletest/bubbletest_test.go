package bubbletest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/bubbletest"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A handler that waits a minute answers at once in real time, a minute
// later in the bubble's, over a connection the client then keeps idle;
// the server's cleanup ends every goroutine (or Run fails as a deadlock).
func TestServerAnswersOnTheBubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bubbletest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-time.After(time.Minute) // the bubble's minute
			_, _ = io.WriteString(w, "late "+r.Host)
		}))
		start := time.Now()
		for range 2 {
			resp, err := srv.Client.Get("http://hooks.example/x")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "late hooks.example" {
				t.Fatalf("body %q", b)
			}
		}
		if took := time.Since(start); took != 2*time.Minute {
			t.Errorf("two answers took %v of the bubble's time, want exactly 2m", took)
		}
	})
}

// A store (SQLite, or PostgreSQL with CBDASH_TEST_STORE=postgres) works
// in a bubble: its writes are committed by Settle and stamped with the
// bubble's time (through clocktest.NewRunning, from the test epoch).
func TestAStoreWorksInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := storetest.Open(t, clocktest.NewRunning())
		bubbletest.Advance(time.Hour)
		done := make(chan error, 2)
		for _, name := range []string{"ann", "bob"} {
			go func() {
				_, err := st.CreateUser(context.Background(), name, cbdash.RoleViewer, []byte("hash"))
				done <- err
			}()
		}
		bubbletest.Settle()
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		u, _, err := st.UserByName(context.Background(), "bob")
		if err != nil || !u.CreatedAt.Equal(clocktest.Epoch().Add(time.Hour)) {
			t.Errorf("user %+v (%v), want bob created an hour into the bubble", u, err)
		}
	})
}

// Settle moves the clock by Settling and waits for the goroutines.
func TestSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log strings.Builder
		go func() {
			<-time.After(bubbletest.Settling - time.Millisecond)
			log.WriteString("woke")
		}()
		start := time.Now()
		bubbletest.Settle()
		if took := time.Since(start); took != bubbletest.Settling || log.String() != "woke" {
			t.Errorf("Settle took %v and left %q, want %v and the sleeper woken", took, log.String(), bubbletest.Settling)
		}
	})
}
