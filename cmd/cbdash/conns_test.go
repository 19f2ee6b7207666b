package main

import (
	"log/slog"
	"testing"
)

// The lowering of --max-connections to the open-file limit is a warning
// only when the operator set the flag; the default's is a debug line.
func TestFitTotalWarnsOnlyForATotalTheOperatorSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		total   int
		userSet bool
		limit   uint64
		fit     int
		level   slog.Level
		lowered bool
	}{
		{20000, false, 20000, 19744, slog.LevelDebug, true},
		{20000, true, 20000, 19744, slog.LevelWarn, true},
		{20000, false, 1 << 20, 20000, 0, false},
		{20000, true, 0, 20000, 0, false},
		{1000, true, 300, 150, slog.LevelWarn, true},
	}
	for _, tt := range tests {
		fit, level, lowered := fitTotal(tt.total, tt.userSet, tt.limit)
		if fit != tt.fit || lowered != tt.lowered || (lowered && level != tt.level) {
			t.Errorf("fitTotal(%d, %v, %d) = %d, %v, %v; want %d, %v, %v", tt.total, tt.userSet, tt.limit, fit, level, lowered, tt.fit, tt.level, tt.lowered)
		}
	}
}
