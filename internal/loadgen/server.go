package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cbdash/cbdash/internal/batchjson"
	"github.com/cbdash/cbdash/sdk/protocol"
)

// serverSample is what one scrape of the collector's /metrics says about
// the server process.
type serverSample struct {
	at    time.Time
	cpu   float64          // process_cpu_seconds_total
	rss   float64          // process_resident_memory_bytes
	db    map[string]int64 // Config.DBSize, nil when unknown
	valid bool             // the process metrics were there
	// The store writer's counters (cbdash_store_transactions_total and
	// cbdash_store_operations_total); storeValid when both were there.
	storeTx, storeOps float64
	storeValid        bool
}

// scrape reads the server's own process counters from /metrics (the
// Prometheus text format; only the two untyped-looking lines matter), and
// the database size when withDB and Config.DBSize is set.
func (r *run) scrape(ctx context.Context, withDB bool) serverSample {
	return r.scrapeURL(ctx, r.cfg.URL, withDB)
}

// scrapeURL is scrape of the server at base.
func (r *run) scrapeURL(ctx context.Context, base string, withDB bool) serverSample {
	s := serverSample{at: time.Now()}
	if withDB && r.cfg.DBSize != nil {
		if m, err := r.cfg.DBSize(ctx); err == nil {
			s.db = m
		} else {
			r.cfg.Logger.Warn("database size", "err", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return s
	}
	if r.cfg.MetricsToken != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.MetricsToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.cfg.Logger.Warn("scrape /metrics", "err", err)
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.cfg.Logger.Warn("scrape /metrics", "status", resp.Status)
		return s
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	found, store := 0, 0
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var p *float64
		n := &found
		switch name {
		case "process_cpu_seconds_total":
			p = &s.cpu
		case "process_resident_memory_bytes":
			p = &s.rss
		case "cbdash_store_transactions_total":
			p, n = &s.storeTx, &store
		case "cbdash_store_operations_total":
			p, n = &s.storeOps, &store
		default:
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			*p = v
			*n++
		}
	}
	s.valid = found == 2
	s.storeValid = store == 2
	return s
}

// SampleBatch returns the JSON of a window-report batch as a simulated
// agent of breakers breakers sends it (the same generator, fixed times):
// the input of the decode-floor benchmark (collector's
// BenchmarkDecodeBatch) and of Result.DecodeFloor.
func SampleBatch(breakers int, seq uint64) []byte {
	names := make([]string, breakers)
	states := make([]string, breakers)
	for i := range names {
		names[i], states[i] = fmt.Sprintf("dep-%02d", i), protocol.StateClosed
	}
	b := windowBatch(names, states, time.Second, 1_700_000_000_000)
	b.Seq = seq
	data, _ := json.Marshal(b)
	return data
}

// decodeFloor measures, in this process, the CPU a decode of one window
// report costs: batches as the agents send them, decoded into
// protocol.Batch as the collector decodes them (batchjson, one goroutine,
// for about 300 ms of wall time, counted in this process's CPU time where
// the system tells it).
func decodeFloor(breakers int) time.Duration {
	if breakers == 0 {
		return 0
	}
	data := SampleBatch(breakers, 1)
	var n int
	start, cpu0 := time.Now(), cpuTime()
	for time.Since(start) < 300*time.Millisecond {
		for range 50 {
			if _, ok := batchjson.Decode(data); !ok {
				return 0
			}
			n++
		}
	}
	spent := time.Since(start)
	if cpu := cpuTime() - cpu0; cpu0 > 0 && cpu > 0 {
		spent = cpu // this process's CPU: the loadgen's other goroutines have stopped by now
	}
	return spent / time.Duration(n*breakers)
}

// CollectorResult is one collector's share of a run against several
// (Config.AgentURLs): the window reports its agents had acknowledged while
// measuring, and its process's CPU and memory over the same span, from
// its own /metrics.
type CollectorResult struct {
	URL          string        `json:"url"`
	Windows      int64         `json:"windows"`        // acked while measuring, by its agents
	CPU          float64       `json:"cpu_cores"`      // its process, over the scrapes' span
	CPUPerReport time.Duration `json:"cpu_per_report"` // CPU over the span / reports it acked in it
	RSS          int64         `json:"rss_bytes"`      // at the end
}

// together returns the CPU of collectors cs together (cores) and per
// report any of them acked; ok false with fewer than two, or when one has
// no CPU figure.
func together(cs []CollectorResult) (cores float64, perReport time.Duration, ok bool) {
	if len(cs) < 2 {
		return 0, 0, false
	}
	var cpu float64 // seconds, each one's CPU per report times its reports
	var windows int64
	for _, c := range cs {
		if c.CPU == 0 {
			return 0, 0, false
		}
		cores += c.CPU
		cpu += c.CPUPerReport.Seconds() * float64(c.Windows)
		windows += c.Windows
	}
	if windows > 0 {
		perReport = time.Duration(cpu / float64(windows) * float64(time.Second))
	}
	return cores, perReport, true
}

// scrapeEach scrapes every collector of Config.AgentURLs when there are
// several; nil otherwise.
func (r *run) scrapeEach(ctx context.Context) []serverSample {
	if len(r.cfg.AgentURLs) < 2 {
		return nil
	}
	out := make([]serverSample, len(r.cfg.AgentURLs))
	for i, u := range r.cfg.AgentURLs {
		out[i] = r.scrapeURL(ctx, u, false)
	}
	return out
}

// collectors turns two rounds of scrapeEach into each collector's result.
func (r *run) collectors(first, last []serverSample) []CollectorResult {
	if len(first) == 0 || len(first) != len(last) {
		return nil
	}
	out := make([]CollectorResult, len(first))
	for i := range first {
		c := CollectorResult{URL: r.cfg.AgentURLs[i], Windows: r.perServer[i].Load()}
		if f, l := first[i], last[i]; f.valid && l.valid {
			span := l.at.Sub(f.at).Seconds()
			c.CPU, c.RSS = (l.cpu-f.cpu)/span, int64(l.rss)
			if c.Windows > 0 {
				c.CPUPerReport = time.Duration((l.cpu - f.cpu) / float64(c.Windows) * float64(time.Second))
			}
		}
		out[i] = c
	}
	return out
}
