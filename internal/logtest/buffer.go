// Package logtest holds what tests need to read what a component logged:
// a log sink that goroutines may write while the test reads it. It is for
// tests only; nothing outside a _test.go file imports it.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that is safe for concurrent writers (a
// server's goroutines, a driver's pool, a plugin's log pump) and a test
// reading it meanwhile. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
