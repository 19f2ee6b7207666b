package tune_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbdash/cbdash"
	"github.com/cbdash/cbdash/internal/tune"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// gatedHistory answers History once release is closed, telling entered
// when a read begins.
type gatedHistory struct {
	points  []cbdash.Point
	entered chan struct{}
	release chan struct{}
}

func (h *gatedHistory) History(ctx context.Context, q cbdash.HistoryQuery) ([]cbdash.Point, error) {
	h.entered <- struct{}{}
	select {
	case <-h.release:
		return h.points, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func live(cbdash.DependencyKey) (protocol.BreakerConfig, error) { return liveSettings, nil }

var dep = cbdash.DependencyKey{Service: "shop", Breaker: "db"}

func TestServiceRunsOneReplayPerSlotAndNeverQueuesUnbounded(t *testing.T) {
	h := &gatedHistory{points: climbing(2, 20, 60, 10, 30, 30), entered: make(chan struct{}, 2), release: make(chan struct{})}
	s := tune.NewService(h, live, 1, time.Minute)
	req := tune.Request{DependencyKey: dep, From: t0, To: t0.Add(time.Hour), Candidates: []string{"failure-rate=20"}}
	first := make(chan error, 1)
	go func() {
		rep, err := s.Replay(context.Background(), req)
		if err == nil && (len(rep.Runs) != 2 || rep.Runs[1].Trips == 0) {
			err = errors.New("runs missing")
		}
		first <- err
	}()
	<-h.entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the slot is taken: a caller that will not wait is told so
	if _, err := s.Replay(ctx, req); !errors.Is(err, tune.ErrBusy) {
		t.Errorf("second replay: %v, want ErrBusy", err)
	}
	close(h.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Replay(context.Background(), req); err != nil { // the slot is free again
		t.Fatal(err)
	}
}

func TestServiceBudgetEndsAReplay(t *testing.T) {
	h := &gatedHistory{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := tune.NewService(h, live, 1, time.Nanosecond)
	_, err := s.Replay(context.Background(), tune.Request{DependencyKey: dep, From: t0, To: t0.Add(time.Hour)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want the budget's deadline", err)
	}
}

func TestServiceRefusesBadRanges(t *testing.T) {
	s := tune.NewService(&gatedHistory{}, live, 1, time.Minute)
	for _, r := range [][2]time.Time{{t0, t0}, {t0, t0.Add(25 * time.Hour)}} {
		if _, err := s.Replay(context.Background(), tune.Request{DependencyKey: dep, From: r[0], To: r[1]}); !errors.Is(err, tune.ErrRange) {
			t.Errorf("%v: %v, want ErrRange", r, err)
		}
	}
}
