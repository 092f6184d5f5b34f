package resp

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Handler serves the commands of the connections of a [Server]. All three
// methods run on the goroutine serving the connection (its event loop, or
// its own goroutine for TLS, other systems and --event-loops -1), one at a
// time, so a Handler sees each connection sequentially; calls for
// connections of different loops run concurrently.
type Handler interface {
	// Open is called once when a connection is accepted, before any of
	// its commands. It may append to c.Out (written before the first
	// read) and call c.CloseAfterReply to turn the client away.
	Open(c *Conn)
	// Close is called once when the connection ends, if Open returned
	// normally. The socket is already closed (or, for a connection that
	// Conn.Hijack took, about to be handed to the Hijack function), and the
	// connection no longer counts towards MaxClients nor appears in
	// Server.Range.
	Close(c *Conn)
	// ServeRESP runs one command. args[0] is the command name, exactly as
	// the client sent it. args and its elements alias the connection's
	// read buffer and are valid only until ServeRESP returns: copy what
	// must be kept. Replies are appended to c.Out, usually with redcon's
	// Append* functions.
	ServeRESP(c *Conn, args [][]byte)
}

// BeforeWriter is implemented by a Handler that must hold replies back
// until something else has happened (durable persistence: with fsync
// "always" a reply leaves only once its change is on disk). BeforeWrite
// runs on the connection's goroutine before each write of replies; an
// error closes the connection without writing them.
type BeforeWriter interface {
	BeforeWrite(c *Conn) error
}

// A Deferrer is a BeforeWriter that can also tell, without waiting,
// whether a connection's replies may leave (with fsync "always": whether
// its changes are durable). With Config.HoldReplies an event loop then
// holds the replies of a connection that must wait, serves its other
// clients meanwhile (their changes join the next sync), and writes the
// held replies once Ready says so. SetNotify registers a function the
// Deferrer calls, from any goroutine, whenever Ready may have become true.
type Deferrer interface {
	BeforeWriter
	Ready(c *Conn) bool
	SetNotify(fn func())
}

// Stats are counters of a [Server] since NewServer, named after the Redis
// INFO fields they mirror.
type Stats struct {
	// ConnectedClients is the number of connections being served now
	// (connected_clients).
	ConnectedClients int64
	// TotalConnections is the number of connections accepted and served,
	// refused ones excluded (total_connections_received).
	TotalConnections int64
	// RejectedConnections is the number of connections refused because
	// MaxClients were connected, or by Config.Refuse
	// (rejected_connections).
	RejectedConnections int64
	// ProtocolErrors is the number of clients closed for a malformed or
	// over-limit request.
	ProtocolErrors int64
	// OutputLimitDrops is the number of clients closed because their
	// replies exceeded MaxOutputBuffer.
	OutputLimitDrops int64
	// NetInputBytes and NetOutputBytes count the bytes read from and
	// written to clients (total_net_input_bytes, total_net_output_bytes).
	// Bytes of connections still open are counted up to their last batch.
	NetInputBytes  int64
	NetOutputBytes int64
}

// Accept retry delays, as in net/http.
const (
	acceptDelayMin = 5 * time.Millisecond
	acceptDelayMax = time.Second
)

// rejectWriteTimeout bounds the write of the "max number of clients" error
// or of a Config.Refuse reply, which happens on the accept goroutine for a
// plain TCP connection (its socket buffer is empty: the write does not
// wait). Any other connection (TLS: the write runs the handshake first)
// is refused on a goroutine of its own, within refuseSlowTimeout.
const (
	rejectWriteTimeout = 100 * time.Millisecond
	refuseSlowTimeout  = 10 * time.Second
)

// Server accepts RESP2 connections and serves them with a [Handler]. Create
// one with [NewServer]; its methods are safe for concurrent use.
type Server struct {
	cfg     Config // defaults applied
	handler Handler
	before  BeforeWriter // handler's BeforeWrite, if it has one
	logger  *slog.Logger

	// now is the clock of the event loops, in Unix nanoseconds: time.Now,
	// or a test's. cronHook, if set (tests), runs after each check of the
	// loops' timeouts, with the time of the check.
	now      func() int64
	cronHook func(now int64)

	nextID     atomic.Int64
	inShutdown atomic.Bool // set once, under mu, by Shutdown or Close

	totalConns  atomic.Int64
	rejected    atomic.Int64
	protoErrors atomic.Int64
	outputDrops atomic.Int64

	mu         sync.Mutex // guards the fields below
	listeners  map[*net.Listener]struct{}
	addr       net.Addr
	conns      map[*Conn]struct{}
	closedIn   int64                   // net input bytes of connections that have ended
	closedOut  int64                   // net output bytes of connections that have ended
	done       chan struct{}           // closed when shutdown begins; ends an accept backoff
	loopsTried bool                    // the event loops were started, or failed to
	loops      []*loop                 // event loops; empty: a goroutine per connection
	deferrer   Deferrer                // with Config.HoldReplies: the Handler, if it is one
	loopList   atomic.Pointer[[]*loop] // loops, for notifyHeld (any goroutine)
	// connWG counts registered connections. Add is called only with mu
	// held and inShutdown false, so Shutdown may Wait once it is set.
	connWG sync.WaitGroup
}

// NewServer returns a server with the limits of cfg (zero fields take their
// defaults; see [Config]) that serves connections with h. Nothing happens
// until [Server.Serve]. An invalid cfg is reported by Serve.
func NewServer(cfg Config, h Handler) *Server {
	bw, _ := h.(BeforeWriter)
	if h == nil {
		panic("resp: nil Handler")
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:       cfg,
		handler:   h,
		before:    bw,
		logger:    cfg.Logger,
		listeners: make(map[*net.Listener]struct{}),
		conns:     make(map[*Conn]struct{}),
		done:      make(chan struct{}),
		now:       func() int64 { return time.Now().UnixNano() },
	}
	if d, ok := h.(Deferrer); ok && cfg.HoldReplies {
		s.deferrer = d
		d.SetNotify(s.notifyHeld)
	}
	return s
}

// Serve accepts connections on ln and serves each on its own goroutine. It
// blocks until ln fails or the server is shut down, and closes ln before
// returning. After Shutdown or Close it returns ErrServerClosed; it also
// returns the error of Config.Validate, or a non-temporary Accept error.
// Temporary Accept errors are retried after 5 ms, doubling up to 1 s.
// Serve may be called for several listeners.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.cfg.Validate(); err != nil {
		ln.Close()
		return err
	}
	if !s.trackListener(&ln) {
		ln.Close()
		return ErrServerClosed
	}
	defer s.untrackListener(&ln)

	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return ErrServerClosed
			}
			if !isTemporary(err) {
				return err
			}
			delay = min(max(2*delay, acceptDelayMin), acceptDelayMax)
			s.logger.Error("resp: accept error; retrying", "err", err, "delay", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return ErrServerClosed
			}
			continue
		}
		delay = 0
		s.accept(nc)
	}
}

// isTemporary reports whether an Accept error is worth retrying (for
// example EMFILE), as net/http decides.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// trackListener registers ln, unless shutdown has begun.
func (s *Server) trackListener(ln *net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		return false
	}
	s.listeners[ln] = struct{}{}
	if s.addr == nil {
		s.addr = (*ln).Addr()
	}
	return true
}

// untrackListener closes ln unless shutdown closed it already.
func (s *Server) untrackListener(ln *net.Listener) {
	s.mu.Lock()
	_, ok := s.listeners[ln]
	delete(s.listeners, ln)
	s.mu.Unlock()
	if ok {
		(*ln).Close()
	}
}

// accept registers a new connection and starts its goroutine, or refuses
// it when MaxClients are connected or shutdown has begun.
func (s *Server) accept(nc net.Conn) {
	if s.cfg.Refuse != nil {
		if msg := s.cfg.Refuse(nc.RemoteAddr()); msg != nil {
			s.rejected.Add(1)
			refuse(nc, msg)
			return
		}
	}
	s.mu.Lock()
	if s.inShutdown.Load() {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= s.cfg.MaxClients {
		s.mu.Unlock()
		s.rejected.Add(1)
		refuse(nc, rawMaxClients)
		return
	}
	c := &Conn{
		srv:     s,
		id:      s.nextID.Add(1),
		remote:  addrString(nc.RemoteAddr()),
		local:   addrString(nc.LocalAddr()),
		created: time.Now(),
		rd:      newReader(&s.cfg),
	}
	if lp := s.eventLoop(c.id); lp != nil {
		if fd, ok := detachFD(nc); ok {
			c.lp, c.fd, c.fdOpen = lp, fd, true
		}
	}
	if c.lp == nil {
		c.nc, c.raw = nc, newRawSock(nc)
	}
	c.lastActive.Store(c.created.UnixNano())
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()

	s.totalConns.Add(1)
	if c.lp != nil {
		c.lp.add(c)
	} else {
		go s.serveConn(c)
	}
}

// refuse writes msg to a connection that is not served and closes it.
func refuse(nc net.Conn, msg []byte) {
	if _, ok := nc.(*net.TCPConn); ok {
		nc.SetWriteDeadline(time.Now().Add(rejectWriteTimeout))
		nc.Write(msg)
		nc.Close()
		return
	}
	go func() {
		nc.SetDeadline(time.Now().Add(refuseSlowTimeout))
		nc.Write(msg)
		nc.Close()
	}()
}

// notifyHeld is the Deferrer's notification: it wakes the event loops
// holding replies.
func (s *Server) notifyHeld() {
	if p := s.loopList.Load(); p != nil {
		for _, l := range *p {
			l.wakeHeld()
		}
	}
}

// eventLoop returns the event loop for connection id, starting the loops
// on first use, or nil when connections get goroutines of their own. The
// caller holds s.mu.
func (s *Server) eventLoop(id int64) *loop {
	n := s.EventLoops()
	if n == 0 {
		return nil
	}
	if !s.loopsTried {
		s.loopsTried = true
		loops, err := newLoops(s, n)
		if err != nil {
			s.logger.Warn("resp: no event loops; serving each connection on its own goroutine", "err", err)
		}
		s.loops = loops
		s.loopList.Store(&loops)
	}
	if len(s.loops) == 0 {
		return nil
	}
	return s.loops[int(id%int64(len(s.loops)))]
}

// EventLoops returns how many event loops serve the server's plain TCP
// connections: Config.EventLoops, GOMAXPROCS for 0, and 0 (a goroutine
// per connection) for -1 or on systems other than Linux. If the loops
// cannot be started at the first connection, the server logs a warning
// and uses goroutines after all.
func (s *Server) EventLoops() int {
	switch {
	case s.cfg.EventLoops < 0 || runtime.GOOS != "linux":
		return 0
	case s.cfg.EventLoops == 0:
		return runtime.GOMAXPROCS(0)
	default:
		return s.cfg.EventLoops
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// serveConn runs one connection from Open to Close, isolating panics: a
// panic in the Handler is logged with its stack and ends only this
// connection.
func (s *Server) serveConn(c *Conn) {
	opened, hijacked := false, false
	defer func() {
		if v := recover(); v != nil {
			s.logPanic(c, "ServeRESP or Open", v)
		}
		if hijacked {
			rest := c.hijackRest()
			s.finish(c, opened)
			go c.runHijack(c.nc, rest)
			return
		}
		c.state.Store(connClosed)
		c.nc.Close()
		s.finish(c, opened)
	}()
	s.handler.Open(c)
	opened = true
	hijacked = c.serve()
}

// finish unregisters a closed connection and runs Handler.Close if Open
// returned normally.
func (s *Server) finish(c *Conn, opened bool) {
	s.mu.Lock()
	delete(s.conns, c)
	s.closedIn += c.netIn.Load()
	s.closedOut += c.netOut.Load()
	s.mu.Unlock()
	if opened {
		s.closeHandler(c)
	}
	s.connWG.Done()
}

// closeHandler calls Handler.Close, logging a panic instead of raising it.
func (s *Server) closeHandler(c *Conn) {
	defer func() {
		if v := recover(); v != nil {
			s.logPanic(c, "Close", v)
		}
	}()
	s.handler.Close(c)
}

func (s *Server) logPanic(c *Conn, where string, v any) {
	const size = 64 << 10
	buf := make([]byte, size)
	buf = buf[:runtime.Stack(buf, false)]
	s.logger.Error("resp: panic in handler; closing connection",
		"where", where, "id", c.id, "addr", c.remote, "panic", v, "stack", string(buf))
}

// Shutdown stops the server gracefully. It closes the listeners, so Serve
// returns ErrServerClosed; closes idle connections (waiting for input) at
// once; and lets each connection running a batch finish it, flush its
// replies and close. A client therefore receives a reply for every command
// that ran, and no command runs after its last reply. Shutdown waits for
// every connection to end, Handler.Close included, and returns nil; or,
// if ctx ends first, closes the remaining connections and returns
// ctx.Err() without waiting for their handlers to return.
func (s *Server) Shutdown(ctx context.Context) error {
	conns, lnErr := s.beginShutdown()
	for _, c := range conns {
		c.closeIfIdle()
	}
	allGone := make(chan struct{})
	go func() {
		s.connWG.Wait()
		close(allGone)
	}()
	select {
	case <-allGone:
		return lnErr
	case <-ctx.Done():
		for _, c := range s.snapshot() {
			c.Kill()
		}
		return ctx.Err()
	}
}

// Close closes the listeners and every connection immediately, without
// waiting: a connection's running command completes but its replies are
// lost, and Handler.Close may run after Close returns. Use Shutdown to
// stop gracefully. It returns the error of closing a listener, if any.
func (s *Server) Close() error {
	conns, lnErr := s.beginShutdown()
	for _, c := range conns {
		c.Kill()
	}
	return lnErr
}

// beginShutdown marks the server as shutting down, closes its listeners
// and returns a snapshot of its connections. No connection is registered
// afterwards.
func (s *Server) beginShutdown() ([]*Conn, error) {
	s.mu.Lock()
	if !s.inShutdown.Load() {
		s.inShutdown.Store(true)
		close(s.done)
		for _, l := range s.loops {
			l.wake()
		}
	}
	var lnErr error
	for ln := range s.listeners {
		if err := (*ln).Close(); err != nil && lnErr == nil {
			lnErr = err
		}
		delete(s.listeners, ln)
	}
	s.mu.Unlock()
	return s.snapshot(), lnErr
}

// snapshot returns the live connections in ID order.
func (s *Server) snapshot() []*Conn {
	s.mu.Lock()
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	slices.SortFunc(conns, func(a, b *Conn) int { return cmp.Compare(a.id, b.id) })
	return conns
}

// Addr returns the address of the first listener given to Serve, or nil
// before Serve is called.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{
		TotalConnections:    s.totalConns.Load(),
		RejectedConnections: s.rejected.Load(),
		ProtocolErrors:      s.protoErrors.Load(),
		OutputLimitDrops:    s.outputDrops.Load(),
	}
	s.mu.Lock()
	st.ConnectedClients = int64(len(s.conns))
	st.NetInputBytes, st.NetOutputBytes = s.closedIn, s.closedOut
	for c := range s.conns {
		st.NetInputBytes += c.netIn.Load()
		st.NetOutputBytes += c.netOut.Load()
	}
	s.mu.Unlock()
	return st
}

// Range calls fn for each live connection in ID order (oldest first) until
// fn returns false. It iterates over a snapshot taken without holding any
// lock during the calls, so fn may call any Server or Conn method; a
// connection may end while fn looks at it, and one may be yielded before
// its Handler.Open has returned. Only the Conn methods documented as safe
// for concurrent use may be called on connections other than the caller's
// own.
func (s *Server) Range(fn func(c *Conn) bool) {
	for _, c := range s.snapshot() {
		if !fn(c) {
			return
		}
	}
}
