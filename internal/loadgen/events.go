package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// follow reads the event stream until ctx ends, reopening it when the
// collector drops it.
func (r *run) follow(ctx context.Context, resp *http.Response) {
	for {
		stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
		r.readEvents(resp)
		stop()
		if ctx.Err() != nil {
			return
		}
		r.subDrops.Add(1)
		for {
			var err error
			if resp, err = r.subscribe(ctx); err == nil {
				break
			}
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// readEvents reads the server-sent event stream until it ends, recording
// when each transition arrives.
func (r *run) readEvents(resp *http.Response) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		at := time.Now()
		var e struct {
			Kind       string `json:"kind"`
			Transition *struct {
				Instance   string    `json:"instance"`
				Breaker    string    `json:"breaker"`
				Generation uint64    `json:"generation"`
				ReceivedAt time.Time `json:"received_at"`
			} `json:"transition"`
		}
		if json.Unmarshal([]byte(line[6:]), &e) != nil || e.Transition == nil {
			continue
		}
		r.seen(key(e.Transition.Instance, e.Transition.Breaker, e.Transition.Generation), e.Transition.ReceivedAt, at)
	}
}
