package envoyrls

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// The gRPC port's limits (docs/limits.md). Each is enforced
// by gRPC or by the listener before the memory it bounds is spent: a
// caller without the token, or with a message too large, has at most one
// stream window of its message buffered, and only while its call is
// refused.
const (
	// MaxRequestBytes bounds one request message (grpc.MaxRecvMsgSize): a
	// larger one is refused with RESOURCE_EXHAUSTED from its 5-byte length
	// prefix, before its body is read. A RateLimitRequest is a domain and
	// a few descriptors: hundreds of bytes.
	MaxRequestBytes = 64 << 10
	// MaxStreamsPerConn is the calls one connection has under way at once
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): the next stream is refused
	// with REFUSED_STREAM. Clients that read the setting queue the call
	// (gRPC-Go; Envoy, unless its cluster's max_concurrent_streams makes
	// it open another connection). 100 is the minimum RFC 9113
	// recommends.
	MaxStreamsPerConn = 100
	// MaxHeaderListBytes bounds one call's header list, uncompressed
	// (SETTINGS_MAX_HEADER_LIST_SIZE); a larger one resets the stream.
	// Envoy's call to the rate limit service carries well under 1 KiB.
	MaxHeaderListBytes = 16 << 10
	// StreamWindowBytes is the static HTTP/2 flow-control window of a
	// stream: the bytes of a call the server holds before its handler
	// reads them (dynamic, BDP-estimated windows are off: they could grow
	// to 16 MiB a stream). ConnWindowBytes is the connection's.
	StreamWindowBytes = 64 << 10
	ConnWindowBytes   = 1 << 20
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface (grpc.ConnectionTimeout; gRPC's default is 120s).
	HandshakeTimeout = 10 * time.Second
	// MaxConnectionIdle closes, with GOAWAY, a connection without a call
	// for this long: it gives its slot of the connection cap back.
	MaxConnectionIdle = 5 * time.Minute
	// KeepaliveTime is how long a connection may stay silent before the
	// server pings it; KeepaliveTimeout how long the ack may take before
	// the connection is closed (it is also the socket's TCP_USER_TIMEOUT
	// on Linux): dead peers give their slots back.
	KeepaliveTime    = time.Minute
	KeepaliveTimeout = 20 * time.Second
	// KeepaliveMinTime is the shortest interval between a client's pings
	// that the server tolerates, with or without calls under way (Envoy's
	// connection_keepalive pings idle connections too): a client pinging
	// more often gets GOAWAY ENHANCE_YOUR_CALM "too_many_pings" on its
	// third offence and is disconnected. gRPC's default is 5 minutes and
	// no pings without calls.
	KeepaliveMinTime = 10 * time.Second
	// MaxUsers is the ACL users whose calls ("authorization: Basic")
	// the front door holds an authenticated client for at once; a call as
	// another user closes the least recently used one's client (once its
	// calls are done). UserPoolSize is the connections each of those
	// clients keeps to the RESP port, at most: with the front door's own
	// client, at most MaxUsers*UserPoolSize more loopback connections.
	MaxUsers     = 64
	UserPoolSize = 4
	// UserRecheck is how long a user's password, once the server accepted
	// it, is taken without asking the server again: a password changed or
	// a user disabled or deleted stops working on the gRPC port within it.
	UserRecheck = 10 * time.Second
	// maxUserChecks bounds the passwords being checked on the server at
	// once (each a dial and an AUTH): a caller trying passwords waits.
	maxUserChecks = 4
)

// serverLimits is the grpc.ServerOptions that set the limits above. No
// stats handler: ShouldRateLimit's handler reuses a response once
// SendMsg returns (rateLimitService), which a stats handler could still
// be reading.
func serverLimits() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxConcurrentStreams(MaxStreamsPerConn),
		grpc.MaxHeaderListSize(MaxHeaderListBytes),
		grpc.StaticStreamWindowSize(StreamWindowBytes),
		grpc.StaticConnWindowSize(ConnWindowBytes),
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: MaxConnectionIdle,
			Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
	}
}

// connCap is a net.Listener that serves at most max connections at once:
// a connection accepted past it is closed at once, before any of its
// bytes is read, and Accept goes on to the next. A connection counts until
// it is closed.
type connCap struct {
	net.Listener
	max     int64
	open    atomic.Int64
	logger  *slog.Logger // nil: refusals are not logged
	logged  atomic.Int64 // unix nanoseconds of the last refusal logged
	refused atomic.Uint64
}

// refusalLogEvery spaces the log lines of refused connections.
const refusalLogEvery = 10 * time.Second

func newConnCap(ln net.Listener, max int, logger *slog.Logger) *connCap {
	return &connCap{Listener: ln, max: int64(max), logger: logger}
}

func (l *connCap) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			c.Close()
			l.refuse()
			continue
		}
		// gRPC sets it itself on a *net.TCPConn only, which c no longer is.
		setUserTimeout(c, KeepaliveTimeout)
		return &cappedConn{Conn: c, l: l}, nil
	}
}

func (l *connCap) refuse() {
	n := l.refused.Add(1)
	if l.logger == nil {
		return
	}
	now, last := time.Now().UnixNano(), l.logged.Load()
	if now-last < int64(refusalLogEvery) || !l.logged.CompareAndSwap(last, now) {
		return
	}
	l.logger.Warn("envoy rate limit service: connection refused, maxclients connections open",
		"maxclients", l.max, "refused_total", n)
}

// cappedConn gives its slot back when it is closed (once, however many
// times Close is called).
type cappedConn struct {
	net.Conn
	l    *connCap
	once sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
