//go:build linux

package resp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The raw system calls give what the unix package's wrappers give: counts,
// EAGAIN on an empty non-blocking descriptor, and EBADF on a closed one.
func TestRawSyscalls(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	buf := make([]byte, 16)
	if n, err := rawRead(p[0], buf); n != -1 || err != unix.EAGAIN {
		t.Fatalf("read of an empty pipe: %d, %v; want -1, EAGAIN", n, err)
	}
	if n, err := rawWrite(p[1], []byte("hello")); n != 5 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	if n, err := rawRead(p[0], buf); n != 5 || err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read: %d, %v, %q", n, err, buf[:max(n, 0)])
	}
	if n, err := rawWrite(p[1], nil); n != 0 || err != nil {
		t.Fatalf("empty write: %d, %v", n, err)
	}
	unix.Close(p[1])
	if n, err := rawRead(p[0], buf); n != 0 || err != nil {
		t.Fatalf("read at end of input: %d, %v; want 0, nil", n, err)
	}
	if n, err := rawWrite(p[1], []byte("x")); n != -1 || err != unix.EBADF {
		t.Fatalf("write to a closed descriptor: %d, %v; want -1, EBADF", n, err)
	}

	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	events := make([]unix.EpollEvent, 4)
	if n, err := rawEpollPoll(ep, events); n != 0 || err != nil {
		t.Fatalf("poll of an empty epoll set: %d, %v", n, err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, p[0], &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(p[0])}); err != nil {
		t.Fatal(err)
	}
	if n, err := rawEpollPoll(ep, events); n != 1 || err != nil || events[0].Fd != int32(p[0]) {
		t.Fatalf("poll with the pipe's end ready: %d, %v, %+v", n, err, events[0])
	}
}
