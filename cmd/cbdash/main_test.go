package main

import (
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// Every command, the demo included, must stop every goroutine it starts.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logBuffer keeps the concurrent log lines of a test.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
