// Package syncbuf is a bytes.Buffer for tests that is safe for concurrent
// writers and readers: a server's log sink, a child process's stderr. It
// imports nothing of cellserver, so any package's tests can use it.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use. The zero value is
// empty and ready.
type Buffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Contains reports whether what was written so far contains s.
func (l *Buffer) Contains(s string) bool { return strings.Contains(l.String(), s) }
