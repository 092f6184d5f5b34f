//go:build !unix

package commands

import "time"

// cpuTimes reports zeros where getrusage does not exist.
func cpuTimes() (user, sys, childUser, childSys time.Duration) { return 0, 0, 0, 0 }
