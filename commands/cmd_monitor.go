package commands

import (
	"strconv"
	"sync"
	"sync/atomic"
)

// MONITOR, as Redis 7.0's monitorCommand and replicationFeedMonitors: each
// command a client ran is sent to every monitor, after it ran, as one
// status line
//
//	+1339518083.107412 [0 127.0.0.1:60866] "keys" "*"
//
// (the time of the feed, the client's database after the command, its
// address, the arguments quoted as Redis's sdscatrepr), in RESP2 and
// RESP3 alike (Redis sends the same +line, not a push frame). As in
// Redis, commands flagged admin (CONFIG, SLOWLOG, SAVE, SHUTDOWN,
// MONITOR...) are never fed, nor are commands refused before they run
// (unknown, wrong arity, NOAUTH, queued in MULTI: those are fed as EXEC
// runs them, before the EXEC line); secrets are redacted as in SLOWLOG
// (AUTH's arguments, HELLO's AUTH pair). A monitor's lines are queued
// with resp.Conn.Push, so a monitor that does not read is disconnected
// once they pass client-output-buffer-limit; nothing else waits for it.
// While no monitor is connected, a command pays one atomic load.

// monitorTable is the clients in monitor mode.
type monitorTable struct {
	n   atomic.Int32 // len(set): the hot path's only read
	mu  sync.RWMutex
	set map[*client]struct{}
}

// MONITOR: the client receives every command run from now on. A second
// MONITOR is ignored without a reply, as in Redis; inside EXEC it is
// refused (Redis: a DENY BLOCKING client).
func cmdMonitor(x *ctx) {
	if x.inExec {
		x.errorReply(msgMonitorDenyBlocking)
		return
	}
	m := &x.s.monitors
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, on := m.set[x.cl]; on {
		return
	}
	if m.set == nil {
		m.set = make(map[*client]struct{})
	}
	m.set[x.cl] = struct{}{}
	m.n.Store(int32(len(m.set)))
	x.cl.monitor = true
	x.ok()
}

// queuedKeyspace reports whether a transaction holds a command that reads
// or writes keys (Redis: c->mstate.cmd_flags & (CMD_WRITE|CMD_READONLY)).
func queuedKeyspace(q []queued) bool {
	for _, c := range q {
		if c.spec.Flags&(Write|ReadOnly) != 0 {
			return true
		}
	}
	return false
}

// has reports whether cl is in monitor mode (CLIENT LIST's flag O).
func (m *monitorTable) has(cl *client) bool {
	if m.n.Load() == 0 {
		return false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, on := m.set[cl]
	return on
}

// dropMonitor takes cl out of monitor mode (RESET, or it left).
func (s *Service) dropMonitor(cl *client) {
	cl.monitor = false
	m := &s.monitors
	if m.n.Load() == 0 {
		return
	}
	m.mu.Lock()
	if _, on := m.set[cl]; on {
		delete(m.set, cl)
		m.n.Store(int32(len(m.set)))
	}
	m.mu.Unlock()
}

// feedMonitors sends the command x ran to every monitor. The caller
// checked that there is one and that the command is not flagged admin.
func (s *Service) feedMonitors(x *ctx) {
	secret := secretArgs(x.spec, x.args)
	ns := x.clockNS()
	b := make([]byte, 0, 64+16*len(x.args))
	b = append(b, '+')
	b = strconv.AppendInt(b, ns/1e9, 10)
	b = append(b, '.')
	us := ns % 1e9 / 1e3
	for d := int64(100000); d > 1 && us < d; d /= 10 {
		b = append(b, '0')
	}
	b = strconv.AppendInt(b, us, 10)
	b = append(b, " ["...)
	b = strconv.AppendInt(b, int64(x.cl.db.Load()), 10)
	b = append(b, ' ')
	b = append(b, x.c.RemoteAddr()...)
	b = append(b, "] "...)
	for i, a := range x.args {
		if i > 0 {
			b = append(b, ' ')
		}
		if secret != nil && secret[i] {
			a = []byte(redacted)
		}
		b = appendRepr(b, a)
	}
	b = append(b, "\r\n"...)
	m := &s.monitors
	m.mu.RLock()
	for cl := range m.set {
		cl.conn.Push(b)
	}
	m.mu.RUnlock()
}

// appendRepr appends a quoted as Redis's sdscatrepr does: "...", with \\
// \" \n \r \t \a \b escaped, printable ASCII as is, other bytes as \xhh.
func appendRepr(b, a []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, c := range a {
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\a':
			b = append(b, '\\', 'a')
		case '\b':
			b = append(b, '\\', 'b')
		default:
			if c >= 0x20 && c < 0x7f {
				b = append(b, c)
			} else {
				b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
			}
		}
	}
	return append(b, '"')
}
