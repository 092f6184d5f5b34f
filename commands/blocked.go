package commands

import "sync/atomic"

// Blocked clients (INFO clients' blocked_clients): a client counts from
// the moment its command blocks (resp.Conn.Block: WAIT, CL.ACQUIRE ...
// WAIT) until the reply is handed over or the client leaves, whichever
// comes first, exactly once.

// blockedCall is one counted block.
type blockedCall struct {
	done atomic.Bool
	// leave, if not nil, forgets what the client waits for when it
	// leaves while blocked (WAIT's replication.Wait cancel). It is set
	// and read on the connection's loop or goroutine only.
	leave func()
}

// block is x.c.Block counted in blocked_clients: the returned resume
// uncounts the client before it hands the reply over (so a client that
// reads its reply sees itself uncounted), and Service.Close uncounts a
// client that leaves while blocked (dropBlocked).
func (x *ctx) block() (resume func(reply []byte), b *blockedCall) {
	s, cl := x.s, x.cl
	r := x.c.Block()
	b = new(blockedCall)
	s.blocked.Add(1)
	if old := cl.blocked.Swap(b); old != nil {
		s.unblocked(old)
	}
	return func(reply []byte) {
		s.unblocked(b)
		cl.blocked.CompareAndSwap(b, nil)
		r(reply)
	}, b
}

// unblocked uncounts b, once.
func (s *Service) unblocked(b *blockedCall) {
	if b.done.CompareAndSwap(false, true) {
		s.blocked.Add(-1)
	}
}

// dropBlocked uncounts cl's block, if any, and forgets what it waits
// for: cl left.
func (s *Service) dropBlocked(cl *client) {
	if b := cl.blocked.Swap(nil); b != nil {
		s.unblocked(b)
		if b.leave != nil {
			b.leave()
		}
	}
}
