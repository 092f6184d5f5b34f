//go:build !linux

package commands_test

import "time"

var start = time.Now()

// threadCPU falls back to the wall clock where there is no per-thread
// CPU time.
func threadCPU() time.Duration { return time.Since(start) }
