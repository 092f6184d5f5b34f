//go:build unix

package commands

import (
	"syscall"
	"time"
)

// cpuTimes returns the CPU time this process and its waited-for children
// spent in user and system mode (getrusage, as Redis's used_cpu_* fields).
func cpuTimes() (user, sys, childUser, childSys time.Duration) {
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	var self, kids syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) == nil {
		user, sys = tv(self.Utime), tv(self.Stime)
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids) == nil {
		childUser, childSys = tv(kids.Utime), tv(kids.Stime)
	}
	return user, sys, childUser, childSys
}
