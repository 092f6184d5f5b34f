package commands

import (
	"errors"

	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/resp"
)

// Local is an in-process client of the Service: its commands run through
// the dispatcher a RESP connection's commands run through (ServeRESP:
// authentication, the ACL check as the client's user, the cluster check,
// persistence's admission, the replication checks, the shard locks, the
// journal that feeds WATCH, tracking, replicas and the change log, the
// statistics and the slow log), and its replies wait as a connection's do
// (BeforeWrite: held for sync-replicas, NOREPLICAS past its timeout;
// with fsync always, until the changes are durable). Only the network is
// left out: no socket, no RESP parsing; the client is not listed by
// CLIENT LIST nor counted in connected_clients.
//
// A Local is for one goroutine at a time, as a connection is; callers keep
// a pool. Its replies are RESP2, as a connection's before HELLO 3.
type Local struct {
	s    *Service
	conn *resp.Conn
	cl   *client
	dead bool // closed, or its user removed: commands no longer run
}

// ErrLocalClosed is Local.Replies' error once the client is closed, or
// its user was removed (ACL DELUSER or ACL LOAD): a connection would have
// been disconnected.
var ErrLocalClosed = errors.New("commands: in-process client closed")

// NewLocal returns an in-process client, as a connection just accepted
// from loopback: it runs as the default user, authenticated unless the
// server requires a password (send AUTH first, as a connection would).
func (s *Service) NewLocal() *Local {
	conn := new(resp.Conn) // no server: replies stay in conn.Out
	s.Open(conn)
	return &Local{s: s, conn: conn, cl: conn.Context().(*client)}
}

// Send runs one command (args[0] its name); its reply is appended to the
// replies Replies returns. args must not change until Replies returns.
func (l *Local) Send(args [][]byte) {
	if l.dead || l.cl.closed.Load() || l.cl.user.Load().deleted.Load() {
		l.dead = true // as a connection ACL DELUSER disconnected
		return
	}
	// A batch of one input read: each command's latency is its own
	// (Service.call starts a command after the previous one of the same
	// read).
	l.cl.clock.lastEnd = 0
	l.s.ServeRESP(l.conn, args)
}

// SendAudited is Send for a limiter command (CL.FIXED, CL.SLIDING,
// CL.SLIDINGLOG, CL.THROTTLE) whose decision is also appended to the
// audit stream of audit (policy.NewAudit: an Envoy rate limit rule's),
// as CL.APPLY appends a policy's: the stream's key is one of the
// command's keys, locked with it, the entry written with the decision
// (cl_audit.go). Other commands, and any command in cluster mode, run as
// Send runs them.
// client is the entry's client field (the front door's caller).
func (l *Local) SendAudited(args [][]byte, audit *policy.Policy, client string) {
	l.cl.extAudit, l.cl.extClient = audit, client
	l.Send(args)
	l.cl.extAudit, l.cl.extClient = nil, ""
}

// Replies lets the replies of the commands sent since the last call
// leave, as a connection's BeforeWrite does before it writes them, and
// returns them (RESP2, one after the other), valid until the next Send.
func (l *Local) Replies() ([]byte, error) {
	if l.dead {
		l.conn.Out = l.conn.Out[:0]
		return nil, ErrLocalClosed
	}
	if err := l.s.BeforeWrite(l.conn); err != nil {
		l.conn.Out = l.conn.Out[:0]
		return nil, err
	}
	out := l.conn.Out
	l.conn.Out = out[:0]
	if cap(out) > 64<<10 {
		l.conn.Out = nil
	}
	return out, nil
}

// Close ends the client, as a connection's end does.
func (l *Local) Close() {
	l.dead = true
	l.s.Close(l.conn)
}
