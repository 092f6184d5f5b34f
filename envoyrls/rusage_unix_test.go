//go:build unix

package envoyrls_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time of the process so far (user and system), for
// BenchmarkRLSvsRESP.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
