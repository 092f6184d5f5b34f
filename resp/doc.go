// Package resp is the network side of cellserver: a Redis protocol server
// (RESP2, and RESP3 after HELLO 3). It owns the listener, the accept loop, the event loops that
// serve connections, the request reader and its limits, pipelining, reply
// buffering and graceful shutdown. It knows nothing about commands: a
// [Handler] receives each command as a slice of arguments and appends its
// reply to [Conn.Out].
//
// # Model
//
// The connection loop follows redcon's handle(). A connection reads what
// the client has sent, runs every complete command in its buffer in order
// (a batch: the client's pipeline, or the part of it received so far),
// then writes all the replies with one write, and reads again. Replies are
// encoded by the handler with allocation-free appenders: redcon's for
// what RESP2 and RESP3 write alike (redcon.AppendInt, AppendBulk,
// AppendArray, AppendString), and this package's for what differs
// (AppendNull, AppendNullArray, AppendMapLen, AppendSetLen,
// AppendPushLen, AppendVerbatim), given the protocol the connection
// negotiated ([Conn.Protocol], recorded by the handler of HELLO with
// [Conn.SetProtocol]). If c.Out
// passes 64 KiB within a batch it is written out early, so a long pipeline
// does not buffer all its replies; a reply buffer grown past 1 MiB is
// dropped after the batch. A reply built once for many clients (a cached
// CLUSTER SLOTS) is added with [Conn.AppendShared]: checked against the
// output buffer limit before any copy, and, past 64 KiB, written from the
// shared bytes themselves.
//
// # Event loops
//
// On Linux, plain TCP connections are served by event loops
// ([Config.EventLoops], default one per GOMAXPROCS), as Redis serves them:
// each loop waits on epoll (level-triggered) for all of its connections,
// reads once from each ready one in the order epoll reports them and runs
// its batch, then writes the replies of the whole round, calling
// BeforeWrite for each first. A connection is assigned to a loop at accept,
// round-robin. Compared with a goroutine per connection this saves the
// speculative read(2) that ends each batch and the scheduler's work of
// parking and waking a goroutine per request, and serves ready clients
// first come, first served, which keeps tail latency close to the median.
// A client whose socket buffer is full is not read until it drains (its
// input stays in the kernel); one that makes no progress for OutputTimeout
// is closed, as is an idle one past IdleTimeout, by a check that runs
// every 100 ms (or half the timeout, when shorter). The price is Redis's
// too: a slow command delays the other clients of its loop.
//
// TLS connections, systems other than Linux, and EventLoops -1 get a
// goroutine per connection, which runs the same batches with blocking
// reads and writes under deadlines.
//
// The request reader is cellserver's own, not redcon's: redcon's reader
// has no size limits (its buffer doubles without bound) and allocates for
// every command. This one parses in place: arguments alias the read
// buffer, the argument slice is reused, and a steady stream of commands
// costs no allocation. Parsing is resumable: a command arriving in pieces
// is examined once, not from its start on every read, and a bulk of known
// length grows the buffer once, to the size needed. Consumed bytes are
// dropped only between batches.
//
// Both request forms of Redis are accepted:
//
//   - multibulk: "*N\r\n" then N times "$len\r\n<bytes>\r\n". "*0" and
//     negative counts are ignored without a reply, as in Redis.
//   - inline: a line ending in "\n" (an optional "\r" before it is
//     dropped) split like Redis sdssplitargs, with "double quotes" (escapes
//     \n \r \t \b \a \\ \" \xHH) and 'single quotes' (escape \'). Blank
//     lines are ignored.
//
// # Limits
//
// Each limit is a [Config] field; zero means the default.
//
//   - MaxClients, default 10000: a connection past it gets
//     "-ERR max number of clients reached" and is closed. A connection
//     that Config.Refuse turns away (protected mode) gets its reply and is
//     closed as it is accepted, before it counts.
//   - IdleTimeout, default 0 (never): a client silent that long is closed;
//     the same bound applies to each write to it.
//   - MaxBulkLen, default 16 MiB: a larger "$len" gets
//     "Protocol error: invalid bulk length".
//   - MaxMultiBulkLen, default 1048576: a larger "*N" gets
//     "Protocol error: invalid multibulk length". [Conn.SetMaxMultiBulkLen]
//     and [Conn.SetMaxBulkLen] lower the limits per connection.
//   - A client that has not authenticated ([Conn.SetAuthenticated]) may
//     send at most 10 elements per command and bulks of at most 16384
//     bytes: beyond, "Protocol error: unauthenticated multibulk length" or
//     "unauthenticated bulk length", and the connection closes.
//   - Whatever length a "$len" line declares, the read buffer grows only
//     as the bulk's bytes arrive (to twice what has arrived), so a client
//     cannot make the server reserve memory it does not send.
//   - MaxQueryBuffer, default 64 MiB: the unparsed input held for one
//     client, in practice the size of the command being received; past it
//     "Protocol error: client query buffer limit reached".
//   - MaxInlineLen, default 64 KiB: a longer inline line gets
//     "Protocol error: too big inline request".
//   - A "*N" or "$len" line longer than 64 KiB gets "Protocol error: too
//     big mbulk count string" or "too big bulk count string".
//
// Line limits count every byte before the line's '\n' and apply even when
// the '\n' has arrived, so a reply never depends on how the input was
// split into reads.
//
// A malformed request, and one over a limit, is answered like in Redis 7
// (src/networking.c): the complete commands before it in the buffer run
// first, then the client receives "-ERR Protocol error: ..." and is
// closed. Besides the texts above: "expected '$', got 'X'" when an array
// element is not a bulk string, and "unbalanced quotes in request" for an
// inline line with an open quote, or a closing quote followed by something
// other than a blank. Where cellserver differs from Redis:
//
//   - A bulk must be followed by "\r\n"; otherwise "invalid bulk length".
//     Redis skips the two bytes unchecked, which desynchronises the stream.
//   - Count lines must end in "\r\n"; Redis skips the byte after '\r'.
//   - A NUL byte in an inline line is data. Redis's search for the line end
//     stops at a NUL, so it would wait for more input.
//   - MaxQueryBuffer is reported to the client; Redis closes silently.
//
// Protocol errors are logged at debug level, panics and accept errors at
// error level.
//
// # Lifecycle
//
// [NewServer] then [Server.Serve] on a listener. [Server.Shutdown] stops
// accepting, closes idle connections at once and lets busy ones finish the
// batch they are running, write its replies and close, so a client gets a
// reply for every command that ran and no command runs after its last
// reply. When the context ends first, the remaining connections are
// closed. [Server.Close] closes everything at once. A panic in a Handler is
// logged with its stack and closes only its connection. Temporary Accept
// errors are retried after 5 ms, doubling up to 1 s, as in net/http.
//
// # Concurrency
//
// A Server's methods are safe for concurrent use. Each connection's
// Handler calls run one at a time, on its event loop or its own goroutine;
// handler calls for different connections run in parallel (on different
// loops), so state shared between connections needs the handler's own
// synchronisation. A Handler must not block waiting for another client of
// the server: that client may be on the same loop.
//
// Conn methods safe to call from any goroutine (for example from another
// connection's handler, through [Server.Range], for CLIENT LIST or CLIENT
// KILL): ID, RemoteAddr, LocalAddr, Created, LastActive, QueryBufLen,
// OutLen, Context, SetContext, Kill and Push. QueryBufLen and OutLen are
// snapshots updated once per read or write.
//
// Conn.Out, AppendShared, CloseAfterReply, SetAuthenticated,
// SetMaxMultiBulkLen, SetMaxBulkLen, Hijack and Block belong to the
// connection's goroutine: use them only inside the Handler methods called
// for that connection.
// The arguments given to ServeRESP are valid only until it returns.
//
// A command that answers later (WAIT) calls [Conn.Block] instead of
// waiting in ServeRESP, which would hold up every client of its loop. The
// connection then runs nothing more (its pipelined commands stay
// buffered) and its loop goes on serving the others; the resume function
// Block returns may be called from any goroutine, once, with the reply,
// and the connection carries on with its buffered commands. Kill, Close
// and Shutdown close a blocked connection (Shutdown as an idle one), so
// does the client hanging up (event loop or goroutine), IdleTimeout does
// not, pushes reach it, and a resume that comes after it closed does
// nothing.
//
// [Conn.Hijack] hands a connection over to the handler (a replication
// link): once the replies so far are written, the connection leaves the
// server (Handler.Close runs; it no longer counts in Stats, Range or
// MaxClients, and timeouts, Kill, Shutdown and Close no longer touch it)
// and the Hijack function runs on a goroutine of its own with the socket
// as a net.Conn, which an event loop gives up to Go's poller, and the
// input already read after the hijacking command.
package resp
