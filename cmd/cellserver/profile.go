package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names a file to write a CPU profile to, from start to
// exit (go tool pprof reads it). It is for measuring (bench/persistence.sh
// PROFILE=1), not a setting: no flag, no config-file line.
const cpuProfileEnv = "CELLSERVER_CPU_PROFILE"

// startCPUProfile starts profiling when cpuProfileEnv is set; the returned
// function stops it and closes the file.
func startCPUProfile(getenv func(string) string, stderr io.Writer) func() {
	path := getenv(cpuProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "cellserver: %s: %v (not profiling)\n", cpuProfileEnv, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
