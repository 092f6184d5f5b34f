package resp

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"
)

// Defaults for the zero fields of [Config].
const (
	// DefaultMaxClients is the default Config.MaxClients (Redis maxclients).
	DefaultMaxClients = 10000
	// DefaultMaxBulkLen is the default Config.MaxBulkLen: 16 MiB.
	DefaultMaxBulkLen = 16 << 20
	// DefaultMaxMultiBulkLen is the default Config.MaxMultiBulkLen:
	// 1048576 elements.
	DefaultMaxMultiBulkLen = 1 << 20
	// DefaultMaxQueryBuffer is the default Config.MaxQueryBuffer: 64 MiB.
	DefaultMaxQueryBuffer = 64 << 20
	// DefaultMaxOutputBuffer is the default Config.MaxOutputBuffer: 64 MiB.
	DefaultMaxOutputBuffer = 64 << 20
	// DefaultOutputTimeout is the default Config.OutputTimeout: 30s.
	DefaultOutputTimeout = 30 * time.Second
	// DefaultMaxInlineLen is the default Config.MaxInlineLen: 64 KiB, Redis
	// PROTO_INLINE_MAX_SIZE.
	DefaultMaxInlineLen = 64 << 10

	// QueryBufferOverhead is how much larger than MaxBulkLen MaxQueryBuffer
	// must be: room for the count and header lines and the other, smaller
	// arguments of a command that carries one maximal bulk.
	QueryBufferOverhead = 64 << 10
)

// Limits of a client that has not authenticated (see
// [Conn.SetAuthenticated]): Redis's, fixed, so that a client without the
// password cannot make the server hold a large request.
const (
	// UnauthMaxMultiBulkLen is the most elements in a command of a client
	// that has not authenticated.
	UnauthMaxMultiBulkLen = 10
	// UnauthMaxBulkLen is the largest bulk string, in bytes, of a client
	// that has not authenticated.
	UnauthMaxBulkLen = 16384
)

// maxCountLine bounds a "*N" or "$N" line, counting every byte before its
// '\n' (Redis PROTO_INLINE_MAX_SIZE). A valid count line is at most 23
// bytes; the bound only decides which error a garbage line gets.
const maxCountLine = 64 << 10

// Config holds the limits of a [Server]. The zero value of every field
// means its default, so Config{} is a valid configuration.
type Config struct {
	// GroupCommitPasses: when BeforeWrite makes replies wait for a sync
	// (fsync always), an event loop that has run a round's commands first
	// polls for clients that became ready meanwhile and runs theirs too,
	// up to this many more times, so that one sync covers them all. Fewer,
	// larger syncs cost less CPU per command. 0 (the default) turns it
	// off.
	GroupCommitPasses int

	// HoldReplies: when the Handler is a Deferrer, an event loop holds
	// the replies that must wait for a sync and serves other clients
	// meanwhile, instead of waiting in BeforeWrite (see Deferrer). The
	// default is off.
	HoldReplies bool

	// MaxClients is the number of connections served at once. A connection
	// accepted beyond it receives "-ERR max number of clients reached" and
	// is closed. The default value is DefaultMaxClients (10000).
	MaxClients int

	// IdleTimeout closes a client that sends nothing for this long, and
	// bounds each write of replies to it. Zero never closes idle clients
	// (Redis "timeout 0"). The default value is 0.
	IdleTimeout time.Duration

	// MaxOutputBuffer bounds, in bytes, the replies one batch of commands
	// may pile up before they are written (one huge reply, such as KEYS on
	// millions of keys): past it the client is disconnected, as Redis does
	// past client-output-buffer-limit. The default value is
	// DefaultMaxOutputBuffer (64 MiB).
	MaxOutputBuffer int64

	// OutputTimeout bounds each write of replies to a client: a client that
	// keeps sending without reading its replies stops being read (the
	// server blocks on its socket, so its output never grows past the
	// socket buffers and MaxOutputBuffer) and is disconnected once a
	// write has made no progress for this long. The default value is
	// DefaultOutputTimeout (30s); IdleTimeout, when shorter, applies.
	OutputTimeout time.Duration

	// MaxBulkLen is the largest bulk string a client may send, in bytes
	// (Redis proto-max-bulk-len). A larger "$N" is answered with
	// "Protocol error: invalid bulk length". The default value is
	// DefaultMaxBulkLen (16 MiB).
	MaxBulkLen int64

	// MaxMultiBulkLen is the largest number of elements in a command array.
	// A larger "*N" is answered with "Protocol error: invalid multibulk
	// length". It must not exceed math.MaxInt32 (Redis INT_MAX). The
	// default value is DefaultMaxMultiBulkLen (1048576).
	MaxMultiBulkLen int64

	// MaxQueryBuffer bounds, in bytes, the unparsed input buffered for one
	// client: in practice the size of the one command being received,
	// since arguments point into the buffer. Past it the client gets
	// "Protocol error: client query buffer limit reached". It must be at
	// least MaxBulkLen + QueryBufferOverhead and larger than MaxInlineLen.
	// The default value is DefaultMaxQueryBuffer (64 MiB).
	MaxQueryBuffer int64

	// MaxInlineLen is the longest inline command line, in bytes before its
	// '\n'. A longer one is answered with "Protocol error: too big inline
	// request". The default value is DefaultMaxInlineLen (64 KiB).
	MaxInlineLen int

	// EventLoops is the number of event loops that serve plain TCP
	// connections on Linux. A loop waits on epoll for all of its clients,
	// reads from each ready one in turn and runs its commands, then writes
	// the replies of the whole round, as Redis's event loop does: clients
	// are served in the order their input arrived, and a connection costs
	// no goroutine. A Handler runs on its connection's loop, so a slow
	// command delays the other clients of that loop (Redis's own rule).
	// Zero means one loop per GOMAXPROCS. -1 serves each connection on a
	// goroutine of its own instead, which is also what TLS connections and
	// other systems get.
	EventLoops int

	// Refuse, if set, is asked about each accepted connection before it
	// counts towards MaxClients: a non-nil result is written to the client
	// as is and the connection closed at once, with no Handler call, and
	// it counts in Stats.RejectedConnections (Redis's protected mode
	// refuses clients the same way, as it accepts them). It runs on the
	// accepting goroutine, so it must be quick.
	Refuse func(remote net.Addr) []byte

	// Logger receives accept errors and handler panics (error level) and
	// client protocol errors (debug level). nil means slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.MaxClients = cmp.Or(c.MaxClients, DefaultMaxClients)
	c.MaxBulkLen = cmp.Or(c.MaxBulkLen, DefaultMaxBulkLen)
	c.MaxMultiBulkLen = cmp.Or(c.MaxMultiBulkLen, DefaultMaxMultiBulkLen)
	c.MaxQueryBuffer = cmp.Or(c.MaxQueryBuffer, DefaultMaxQueryBuffer)
	c.MaxInlineLen = cmp.Or(c.MaxInlineLen, DefaultMaxInlineLen)
	c.MaxOutputBuffer = cmp.Or(c.MaxOutputBuffer, DefaultMaxOutputBuffer)
	c.OutputTimeout = cmp.Or(c.OutputTimeout, DefaultOutputTimeout)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// Validate reports every problem with c, zero fields standing for their
// defaults, joined with errors.Join. It returns nil for a usable Config.
func (c Config) Validate() error {
	var errs []error
	if c.MaxClients < 0 {
		errs = append(errs, fmt.Errorf("resp: MaxClients %d is negative", c.MaxClients))
	}
	if c.MaxOutputBuffer < 0 {
		errs = append(errs, fmt.Errorf("resp: MaxOutputBuffer %d is negative", c.MaxOutputBuffer))
	}
	if c.OutputTimeout < 0 {
		errs = append(errs, fmt.Errorf("resp: OutputTimeout %v is negative", c.OutputTimeout))
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("resp: IdleTimeout %v is negative", c.IdleTimeout))
	}
	if c.MaxBulkLen < 0 {
		errs = append(errs, fmt.Errorf("resp: MaxBulkLen %d is negative", c.MaxBulkLen))
	}
	if c.MaxMultiBulkLen < 0 || c.MaxMultiBulkLen > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("resp: MaxMultiBulkLen %d is outside [0, %d]", c.MaxMultiBulkLen, math.MaxInt32))
	}
	if c.MaxQueryBuffer < 0 {
		errs = append(errs, fmt.Errorf("resp: MaxQueryBuffer %d is negative", c.MaxQueryBuffer))
	}
	if c.EventLoops < -1 {
		errs = append(errs, fmt.Errorf("resp: EventLoops %d is less than -1", c.EventLoops))
	}
	if c.MaxInlineLen < 0 {
		errs = append(errs, fmt.Errorf("resp: MaxInlineLen %d is negative", c.MaxInlineLen))
	}
	if len(errs) == 0 {
		d := c.withDefaults()
		if d.MaxBulkLen > math.MaxInt-QueryBufferOverhead || d.MaxQueryBuffer > math.MaxInt-maxCountLine {
			errs = append(errs, fmt.Errorf("resp: MaxBulkLen %d or MaxQueryBuffer %d does not fit in an int", d.MaxBulkLen, d.MaxQueryBuffer))
		} else {
			if d.MaxQueryBuffer < d.MaxBulkLen+QueryBufferOverhead {
				errs = append(errs, fmt.Errorf("resp: MaxQueryBuffer %d is less than MaxBulkLen %d + %d", d.MaxQueryBuffer, d.MaxBulkLen, QueryBufferOverhead))
			}
			if d.MaxQueryBuffer <= int64(d.MaxInlineLen) {
				errs = append(errs, fmt.Errorf("resp: MaxQueryBuffer %d is not larger than MaxInlineLen %d", d.MaxQueryBuffer, d.MaxInlineLen))
			}
		}
	}
	return errors.Join(errs...)
}
