package server

import (
	"io"
	"log/slog"
	"sync"
)

// CountTLSReads counts the reads of each TLS file until restore.
func CountTLSReads() (reads func() map[string]int, restore func()) {
	var mu sync.Mutex
	n := map[string]int{}
	orig := readFile
	readFile = func(name string) ([]byte, error) {
		mu.Lock()
		n[name]++
		mu.Unlock()
		return orig(name)
	}
	reads = func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		m := make(map[string]int, len(n))
		for k, v := range n {
			m[k] = v
		}
		return m
	}
	return reads, func() { readFile = orig }
}

// SetLogOutput makes the loggers New builds write to w until restore.
func SetLogOutput(w io.Writer) (restore func()) {
	orig := logOutput
	logOutput = w
	return func() { logOutput = orig }
}

// Logger returns the logger s logs to.
func (s *Server) Logger() *slog.Logger { return s.cfg.Logger }
