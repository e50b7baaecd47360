package testenv

import (
	"bytes"
	"sync"
)

// SyncBuffer collects a process's or a goroutine's output while the test
// reads it: a bytes.Buffer safe for concurrent use. Every test that
// watches output as it is written uses this one.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
