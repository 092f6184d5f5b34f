// Package commands executes cellserver's commands: one table of command
// specs (table.go: name, arity, flags, key positions, handler; joined at
// startup with docs.go's table of what COMMAND DOCS and COMMAND INFO
// report), a dispatcher that finds the spec, checks arity, authentication
// and MULTI state and runs the handler, and every wire error text
// (errors.go).
//
// # Layout
//
// Files are filed by family. The product, the limiter commands, is in
// cl_*.go: cl_throttle.go (CL.THROTTLE), cl_gcra.go (GCRA, Redis's draft),
// cl_pace.go, cl_window.go (CL.FIXED, CL.SLIDING, CL.SLIDINGLOG),
// cl_inspect.go (CL.PEEK, CL.INFO), cl_all.go, cl_leases.go (CL.ACQUIRE
// with its WAIT queue, CL.RELEASE), cl_reserve.go (CL.RESERVE, CL.SETTLE,
// CL.CANCEL) and cl_policy.go (CL.APPLY, CL.POLICY), with what they share
// (the reply tuple, the check type, the state in a keyspace.Value) in
// cl_value.go. What cellserver owes Redis is in cmd_<group>.go, grouped
// as COMMAND DOCS groups them (connection, transactions, generic, string,
// server, pubsub, cluster) with server's and connection's families apart
// as in Redis's sources (replication, slowlog, latency, memory, module,
// tracking). TestCommandFileLayout checks that every row's handler is
// where its family says. The rest is the machinery: service.go (Config,
// New, the Service's lifecycle), dispatch.go, client.go (the per-
// connection state, grouped by the file that owns each part), reply.go,
// keys.go, spec.go, table.go, docs.go, errors.go, info.go, stats.go,
// parse.go and blocked.go.
//
// # Model
//
// A Service implements resp.Handler. Each connection's commands run one at
// a time on the goroutine serving it (its event loop, or its own
// goroutine: see resp.Handler) with a reused execution context (ctx). The
// dispatcher resolves a command's keys from its spec (keys.go: each hashed
// once, with its shard and, in cluster mode, its hash slot) and holds
// their shard locks, taken in the global order, while the handler runs
// (read -> decide -> write under one lock); handlers read their arguments
// as []byte and append the reply to the connection's output buffer with
// redcon's appenders. The hot path of
// CL.THROTTLE allocates nothing once its key exists.
//
// The rate-limit arithmetic lives in the pure packages gcra (CL.THROTTLE,
// exactly redis-cell's) and limiter (the other algorithms); this package
// parses arguments, reads and writes the keyspace, and shapes replies.
//
// # Time
//
// The wall clock (Config.Clock, injectable for tests) is read at most once
// per command; key expiry uses the same reading in milliseconds.
//
// # Transactions
//
// MULTI queues copies of the commands, up to Config.MultiMaxCommands and
// MultiMaxBytes; EXEC takes the locks of the shards its commands' keys and
// the watched keys are on (every shard lock of every database when one
// command needs more than its keys: WholeKeyspace), in the global order,
// and runs them through the dispatcher's call path, so no other client's
// command on those shards interleaves, and clients on other shards go on.
// WATCH registers keys in a table that the keyspace's Journal consults on
// every change (one atomic load while nobody watches); a change marks the
// watchers dirty, and EXEC, holding the watched keys' shard locks,
// answers a null array instead of running the queue (cmd_transactions.go).
//
// # Errors
//
// Go code returns Go errors; the translation to wire texts happens here, in
// one place. CL.THROTTLE's errors reach the wire exactly as redis-cell's
// ("Cell error: Store error: ..."), after Redis's sanitising of echoed
// arguments; Redis commands use Redis 7's texts.
package commands
