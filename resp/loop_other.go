//go:build !linux

package resp

import (
	"errors"
	"net"
)

// loop is an epoll event loop; other systems serve every connection on a
// goroutine of its own.
type loop struct{ index int }

func newLoops(*Server, int) ([]*loop, error) {
	return nil, errors.New("resp: event loops need Linux")
}

func (l *loop) add(*Conn)        {}
func (l *loop) wake()            {}
func (l *loop) addPush(*Conn)    {}
func (l *loop) block(*Conn)      {}
func (l *loop) addResume(*block) {}
func (l *loop) wakeHeld()        {}

func detachFD(net.Conn) (int, bool) { return -1, false }
func shutdownFD(int)                {}
