//go:build !unix

package envoyrls_test

import "time"

// cpuTime is not measured here: BenchmarkRLSvsRESP reports no CPU figures.
func cpuTime() time.Duration { return 0 }
