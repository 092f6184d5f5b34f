//go:build !linux

package envoyrls

import (
	"net"
	"time"
)

// setUserTimeout is a no-op: TCP_USER_TIMEOUT is Linux's.
func setUserTimeout(net.Conn, time.Duration) {}
