package source

import (
	"io"
	"runtime"
	"strings"
	"testing"
)

// repeat is a reader of s written n times, made as it is read.
type repeat struct {
	s   string
	n   int
	off int
}

func (r *repeat) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	c := copy(p, r.s[r.off:])
	if r.off += c; r.off == len(r.s) {
		r.off, r.n = 0, r.n-1
	}
	return c, nil
}

// An oversized event is skipped without being held: 64 MiB of data in
// 8 MiB lines, between good events, costs the reader less than one of the
// lines in allocations (its line buffer grows to 1 MiB once, then is
// reused; 4.7 MB measured), and the good events all come out.
func TestReadEventsSkipsOversizedEventsInBoundedMemory(t *testing.T) {
	good := "data: {\"type\":\"HystrixCommand\",\"name\":\"a\"}\n\n"
	huge := "data: " + strings.Repeat("x", 8<<20) + "\n\n"
	out := make(chan event, 64)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	r := io.MultiReader(strings.NewReader(good), &repeat{s: huge, n: 8}, strings.NewReader(good))
	if err := readEvents(r, out, nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&ms)
	allocated := ms.TotalAlloc - before
	close(out)
	var goods, large int
	for ev := range out {
		switch {
		case ev.tooLarge > 8<<20:
			large++
		case string(ev.data) == `{"type":"HystrixCommand","name":"a"}`:
			goods++
		default:
			t.Errorf("unexpected event %+v", ev)
		}
	}
	if goods != 2 || large != 8 {
		t.Errorf("%d good events, %d too large, want 2 and 8", goods, large)
	}
	t.Logf("allocated %d bytes reading 64 MiB of oversized events", allocated)
	if allocated >= 8<<20 {
		t.Errorf("allocated %d bytes reading 64 MiB of oversized events, want less than one 8 MiB line", allocated)
	}
}
