package storetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/store"
	"github.com/cbdash/cbdash/internal/storetest"
)

func TestOpenIsOnTheGivenClockAndReopens(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.Virtual()
	clk.Advance(time.Hour)
	path := storetest.Path(t)
	st := storetest.OpenFile(t, path, store.Options{Clock: clk})
	u, err := st.CreateUser(ctx, "ann", cbdash.RoleViewer, []byte("hash"))
	if err != nil {
		t.Fatal(err)
	}
	if want := clocktest.Epoch().Add(time.Hour); !u.CreatedAt.Equal(want) {
		t.Errorf("created at %v, want the clock's %v", u.CreatedAt, want)
	}
	if err := st.Close(); err != nil { // closing early is allowed
		t.Fatal(err)
	}
	again := storetest.OpenFile(t, path, store.Options{})
	if _, _, err := again.UserByName(ctx, "ann"); err != nil {
		t.Errorf("reopened store lost the user: %v", err)
	}
	if n, err := storetest.Open(t, clk).CountUsers(ctx); err != nil || n != 0 {
		t.Errorf("a new store holds %d users (%v), want 0", n, err)
	}
}
