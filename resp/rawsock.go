package resp

import (
	"net"
	"syscall"
)

// rawSock writes to a plain TCP connection through its syscall.RawConn.
// A reply almost always fits the socket buffer, so tryWrite tries
// write(2) at once, without setting a write deadline: net.Conn.Write under
// a deadline costs a runtime timer update and a clock read per write,
// which showed in profiles of pipelined load. Only a write that would
// block falls back to net.Conn.Write under the deadline.
//
// (Reads stay on net.Conn: skipping its first read(2), which usually
// returns EAGAIN, would need to wait on the poller without the readiness
// reset that RawConn.Read performs first, and so could miss data that
// arrived before the wait.)
type rawSock struct {
	rc syscall.RawConn
}

// newRawSock returns a rawSock for nc, or nil when nc is not a plain TCP
// connection (TLS, or a test's net.Pipe).
func newRawSock(nc net.Conn) *rawSock {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return &rawSock{rc: rc}
}

// tryWrite writes as much of b as the socket takes without blocking and
// returns how much that was; the caller writes the rest through net.Conn.
func (s *rawSock) tryWrite(b []byte) (int, error) {
	var n int
	var err error
	if werr := s.rc.Write(func(fd uintptr) bool {
		for {
			n, err = syscall.Write(int(fd), b)
			if err != syscall.EINTR {
				break
			}
		}
		return true // never wait here: a blocked write goes to net.Conn
	}); werr != nil {
		return 0, werr
	}
	if n < 0 {
		n = 0
	}
	if err == syscall.EAGAIN {
		err = nil
	}
	return n, err
}
