package ingest

import (
	"testing"

	"github.com/cbdash/cbdash/internal/loadgen"
)

// BenchmarkDecodeBatch decodes the batches `cbdash loadgen` sends (20
// window reports each, as its simulated agents make them): the floor of
// the collector's CPU per window report. ns/op is per batch; the
// ns/report metric is what `cbdash loadgen` puts beside the server's CPU
// per report.
func BenchmarkDecodeBatch(b *testing.B) {
	for _, breakers := range []int{20, 40, 4} {
		data := loadgen.SampleBatch(breakers, 1)
		b.Run(itoa(breakers)+"breakers", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				m, _, err := decode(data)
				if err != nil || m.Batch == nil || len(m.Batch.Windows) != breakers {
					b.Fatalf("decode: %v", err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*breakers), "ns/report")
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
