package envoyrls

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/server"
)

// LocalStore is a Store that decides in process: the commands RedisStore
// would send to the server's RESP port (the same CL.FIXED, CL.SLIDING,
// CL.SLIDINGLOG and CL.THROTTLE, with the same arguments) run through the
// server's own dispatcher (server.RLSSources.Local, commands.Local), as
// the commands of a RESP connection authenticated as the call's user:
// the same ACL check (NOPERM is PermissionDenied), locks, journal
// (replicas, the change log, WATCH), --sync-replicas (the decision waits
// for its replicas, or is NOREPLICAS past the timeout, as over RESP) and
// fsync always. Only the loopback round trip is left out.
//
// In cluster mode a command answered MOVED, ASK, TRYAGAIN or CLUSTERDOWN
// in process was not run; it is sent again through RedisStore's cluster
// client, which routes it as before (a key another node owns, a slot
// being migrated). The users' passwords are checked as RedisStore checks
// them (UserClients, on the RESP port); each user's decisions run on
// in-process clients authenticated as that user, kept with the user's
// client and dropped with it.
type LocalStore struct {
	RedisStore
	newLocal func() server.LocalClient
	password string    // the server's: the default user's AUTH, when set
	def      localPool // the default user's clients
}

// Idle in-process clients kept per identity: for the default user, and
// for each ACL user. A call finding none opens one (an AUTH in process);
// one returned to a full pool is closed.
const (
	localIdle     = 64
	userLocalIdle = 8
)

// NewLocalStore returns a LocalStore deciding through newLocal, with rs
// for the users' password checks and the keys decided elsewhere; password
// is the server's (the default user's AUTH), "" for none.
func NewLocalStore(rs RedisStore, newLocal func() server.LocalClient, password string) *LocalStore {
	return &LocalStore{RedisStore: rs, newLocal: newLocal, password: password, def: newLocalPool(localIdle)}
}

// Hit implements Store.
func (s *LocalStore) Hit(ctx context.Context, hits []Hit) ([]Result, error) {
	return s.hitInto(ctx, hits, make([]Result, len(hits)))
}

// hitInto is Hit with the results in out (len(hits) zero Results): the
// gRPC handler's buffer, reused from call to call.
func (s *LocalStore) hitInto(ctx context.Context, hits []Hit, out []Result) ([]Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	u := UserFrom(ctx)
	if u.Name == "" {
		return s.hit(ctx, &s.def, s.Client, u, hits, out)
	}
	return s.Users.run(ctx, u, func(e *userClient) ([]Result, error) { return s.hit(ctx, &e.local, e.client, u, hits, out) })
}

// hit decides hits on one of pool's clients (opening one as u when none
// is idle), into out; the commands redirected in cluster mode go through
// client.
func (s *LocalStore) hit(ctx context.Context, pool *localPool, client redis.Cmdable, u User, hits []Hit, out []Result) ([]Result, error) {
	lc := pool.get()
	if lc == nil {
		var err error
		if lc, err = s.open(u); err != nil {
			return nil, err
		}
	}
	lc.peer = auditClient(ctx, hits)
	redo, errAt, err := lc.run(hits, out)
	if errors.Is(err, server.ErrLocalClosed) {
		// As connections the server closed: the user was removed (ACL
		// DELUSER, ACL LOAD), and with it every idle client of the pool.
		// One new client tells whether it exists again with the same
		// password (the call goes on) or not (Unauthenticated, and the
		// caller retires the user's entry).
		lc.c.Close()
		pool.drain()
		if lc, err = s.open(u); err != nil {
			return nil, err
		}
		lc.peer = auditClient(ctx, hits)
		redo, errAt, err = lc.run(hits, out)
		if errors.Is(err, server.ErrLocalClosed) {
			lc.c.Close()
			return nil, status.Errorf(codes.Unavailable, "cellserver: %v", err)
		}
	}
	pool.put(lc)
	if err != nil && errAt < 0 {
		return nil, err
	}
	if len(redo) > 0 {
		sub := make([]Hit, len(redo))
		for i, j := range redo {
			sub[i] = hits[j]
		}
		res, rerr := hit(ctx, client, u, sub)
		if rerr != nil && (err == nil || redo[0] < errAt) { // the first command's error, as a pipeline's
			return nil, rerr
		}
		if rerr == nil {
			for i, j := range redo {
				out[j] = res[i]
			}
		}
	}
	if err != nil {
		return nil, storeError(u, hits[errAt].Key, err)
	}
	return out, nil
}

// open returns a new in-process client authenticated as u (the zero User:
// the default user, with the server's password when it has one), as a
// connection of RedisStore's clients authenticates when it is dialled.
func (s *LocalStore) open(u User) (*localConn, error) {
	lc := &localConn{c: s.newLocal()}
	var args [][]byte
	switch {
	case u.Name != "":
		args = [][]byte{[]byte("AUTH"), []byte(u.Name), []byte(u.Password)}
	case s.password != "":
		args = [][]byte{[]byte("AUTH"), []byte(s.password)}
	default:
		return lc, nil
	}
	lc.c.Send(args)
	out, err := lc.c.Replies()
	if err == nil && !bytes.HasPrefix(out, []byte("+OK\r\n")) {
		err = wireError(string(bytes.TrimSuffix(bytes.TrimPrefix(out, []byte("-")), []byte("\r\n"))))
	}
	if err != nil {
		lc.c.Close()
		if isWrongPass(err) {
			return nil, errWrongPass
		}
		if u.Name == "" {
			return nil, status.Errorf(codes.Unavailable, "cellserver: %v", err)
		}
		return nil, authError(u, err)
	}
	return lc, nil
}

// localPool holds one identity's idle in-process clients.
type localPool struct{ free chan *localConn }

func newLocalPool(n int) localPool { return localPool{free: make(chan *localConn, n)} }

// get returns an idle client, or nil.
func (p *localPool) get() *localConn {
	select {
	case lc := <-p.free:
		return lc
	default:
		return nil
	}
}

// put keeps lc for the next call, or closes it when the pool is full.
func (p *localPool) put(lc *localConn) {
	select {
	case p.free <- lc:
	default:
		lc.c.Close()
	}
}

// drain closes the idle clients (their user's client is closed).
func (p *localPool) drain() {
	for {
		select {
		case lc := <-p.free:
			lc.c.Close()
		default:
			return
		}
	}
}

// localConn is an in-process client and the buffers of its commands,
// reused from call to call.
type localConn struct {
	c    server.LocalClient
	buf  []byte   // every argument of a call's commands, one after the other
	ends []int    // where each argument ends in buf
	args [][]byte // one command's arguments, slices of buf
	peer string   // the call's audit client field (auditClient)
}

// Command names and units, as RedisStore's command sends them.
var (
	argThrottle   = []byte("CL.THROTTLE")
	argSliding    = []byte("CL.SLIDING")
	argSlidingLog = []byte("CL.SLIDINGLOG")
	argFixed      = []byte("CL.FIXED")
	argMS         = []byte("MS")
)

// arg appends one argument to lc.buf.
func (lc *localConn) arg(b []byte) {
	lc.buf = append(lc.buf, b...)
	lc.ends = append(lc.ends, len(lc.buf))
}

func (lc *localConn) num(n int64) {
	lc.buf = strconv.AppendInt(lc.buf, n, 10)
	lc.ends = append(lc.ends, len(lc.buf))
}

func (lc *localConn) nanos(d time.Duration) {
	if d%time.Second == 0 {
		// Whole seconds as a plain integer: the same period, which the
		// command parses without time.ParseDuration's copy of its text.
		lc.num(int64(d / time.Second))
		return
	}
	lc.buf = strconv.AppendInt(lc.buf, int64(d), 10)
	lc.buf = append(lc.buf, "ns"...)
	lc.ends = append(lc.ends, len(lc.buf))
}

// encode appends h's command (RedisStore's command(h)) and returns its
// number of arguments.
func (lc *localConn) encode(h Hit) int {
	q := h.Hits
	switch h.Algorithm {
	case GCRA:
		lc.arg(argThrottle)
		lc.buf = append(lc.buf, h.Key...)
		lc.ends = append(lc.ends, len(lc.buf))
		lc.num(h.Burst)
		lc.num(h.Limit)
		lc.num(int64(h.Period / time.Second))
		lc.num(max(q, 0)) // CL.THROTTLE takes no refund: a refund only reads
		return 6
	case Sliding:
		lc.arg(argSliding)
	case SlidingLog:
		lc.arg(argSlidingLog)
		q = max(q, 0) // CL.SLIDINGLOG takes no refund
	default:
		lc.arg(argFixed)
	}
	lc.buf = append(lc.buf, h.Key...)
	lc.ends = append(lc.ends, len(lc.buf))
	lc.num(h.Limit)
	lc.nanos(h.Period)
	lc.num(q)
	lc.arg(argMS)
	return 6
}

// auditSender is an in-process client that can run a limiter command
// whose decision is appended to an audit stream (commands.Local).
type auditSender interface {
	SendAudited(args [][]byte, audit *policy.Policy, client string)
}

// auditClient is the client field of the audit entries of hits' call:
// the gRPC caller's address (Envoy's ip:port); "" when no hit audits.
func auditClient(ctx context.Context, hits []Hit) string {
	for _, h := range hits {
		if h.Audit != nil {
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				return p.Addr.String()
			}
			return ""
		}
	}
	return ""
}

// run sends hits' commands, then reads their replies into out. It returns
// the indexes of the commands redirected (cluster mode: not run here),
// and the first command that failed (errAt, -1 for none) with its error;
// an error with errAt -1 is the client's own (server.ErrLocalClosed).
func (lc *localConn) run(hits []Hit, out []Result) (redo []int, errAt int, err error) {
	lc.buf, lc.ends = lc.buf[:0], lc.ends[:0]
	for _, h := range hits {
		lc.encode(h)
	}
	start, arg := 0, 0
	for i := range hits {
		lc.args = lc.args[:0]
		for range 6 {
			end := lc.ends[arg]
			lc.args = append(lc.args, lc.buf[start:end:end])
			start = end
			arg++
		}
		if h := hits[i]; h.Audit != nil {
			if a, ok := lc.c.(auditSender); ok {
				a.SendAudited(lc.args, h.Audit, lc.peer)
				continue
			}
		}
		lc.c.Send(lc.args)
	}
	b, err := lc.c.Replies()
	if err != nil {
		return nil, -1, err
	}
	errAt = -1
	for i, h := range hits {
		v, msg, rest, ok := nextReply(b)
		if !ok {
			return nil, -1, fmt.Errorf("%s: unexpected reply %q", h.Key, b)
		}
		b = rest
		if msg != nil {
			if redirected(msg) {
				redo = append(redo, i)
				continue
			}
			if errAt < 0 {
				errAt, err = i, wireError(string(msg))
			}
			continue
		}
		unit := time.Millisecond
		if h.Algorithm == GCRA {
			unit = time.Second
		}
		out[i] = Result{Limited: v[0] == 1, Remaining: v[2], ResetAfter: time.Duration(v[4]) * unit}
	}
	return redo, errAt, err
}

// redirected reports whether an error reply says the command was not run
// because another node serves its key now (cluster mode).
func redirected(msg []byte) bool {
	return bytes.HasPrefix(msg, []byte("MOVED ")) || bytes.HasPrefix(msg, []byte("ASK ")) ||
		bytes.HasPrefix(msg, []byte("TRYAGAIN")) || bytes.HasPrefix(msg, []byte("CLUSTERDOWN"))
}

// nextReply reads the first reply of b, a limiter command's: an array of
// five integers (v), or an error (msg, its text without '-'). ok is false
// for anything else.
func nextReply(b []byte) (v [5]int64, msg, rest []byte, ok bool) {
	line, rest, ok := cutLine(b)
	if !ok || len(line) == 0 {
		return v, nil, nil, false
	}
	switch line[0] {
	case '-':
		return v, line[1:], rest, true
	case '*':
		if string(line) != "*5" {
			return v, nil, nil, false
		}
	default:
		return v, nil, nil, false
	}
	for i := range v {
		line, rest, ok = cutLine(rest)
		if !ok || len(line) < 2 || line[0] != ':' {
			return v, nil, nil, false
		}
		n, err := strconv.ParseInt(string(line[1:]), 10, 64) // no allocation: the conversion does not escape
		if err != nil {
			return v, nil, nil, false
		}
		v[i] = n
	}
	return v, nil, rest, true
}

func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return nil, nil, false
	}
	return b[:i], b[i+2:], true
}

// wireError is an error reply of the server, as go-redis reports one
// (redis.Error): storeError reads NOPERM and WRONGPASS from it.
type wireError string

func (e wireError) Error() string { return string(e) }

// RedisError implements redis.Error.
func (wireError) RedisError() {}
