//go:build linux

package resp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The event loops' hot system calls (read(2) and write(2) on non-blocking
// sockets, and epoll_wait with a zero timeout) are made with RawSyscall,
// without telling Go's scheduler: none of them can block. A system call
// that the scheduler knows of lets sysmon retake the loop's P when the
// call passes 20 µs (a loopback write that delivers to the peer in its own
// softirq can), handing it to another thread, and every retake keeps
// sysmon waking every 20 µs; on a server pinned to one CPU each of those
// wake-ups is a context switch away from the loop (about 6 % of the
// server's CPU time at -P 1 in perf, before this).

// rawRead is read(2) on a non-blocking descriptor.
func rawRead(fd int, p []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// rawWrite is write(2) on a non-blocking descriptor.
func rawWrite(fd int, p []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// rawEpollPoll is epoll_wait with a zero timeout (epoll_pwait, which every
// Linux architecture has, with no signal mask).
func rawEpollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(events))), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
