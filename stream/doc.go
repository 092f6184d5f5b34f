// Package stream is the value behind a Redis stream key (XADD, XRANGE,
// XREADGROUP ...): its entries, its consumer groups, their pending entries
// and consumers, as Redis 7.0.15 keeps them (src/t_stream.c).
//
// It is pure: no clock (every time is an argument, in ms since the Unix
// epoch), no lock (the caller holds the key's shard lock), no I/O.
//
// # Nodes
//
// Entries live in nodes of at most NodeMaxEntries entries and about
// NodeMaxBytes bytes, as Redis keeps them in listpacks under a radix tree
// (stream-node-max-entries 100, stream-node-max-bytes 4096): a node's
// byte count is the size Redis's listpack would have, so that a new node
// starts exactly where Redis starts one, and approximate trimming (MAXLEN
// ~, MINID ~), which removes whole nodes only, removes what Redis removes.
// A deleted entry stays in its node, flagged, until the node is empty, as
// in Redis. Inside a node the entries are kept in a compact encoding of
// their own (IDs as deltas from the node's first, field names left out
// when they repeat the node's first entry's).
//
// # Changes as deltas
//
// A stream can hold hundreds of thousands of entries, so its changes are
// not journaled as whole values: every mutating method also appends an
// operation to the stream's delta (Delta), which the keyspace's journal
// consumers (persistence's change log, the replication stream) write
// instead of the value, and which ApplyDelta replays on a copy of the
// stream in the same state. Each stream has an incarnation (random, new
// for each New, Decode keeps it) and a version (the number of operations
// applied since the incarnation began): a delta names the incarnation and
// the version it starts from, so that replaying a change log over a
// checkpoint that already holds some of its changes skips them
// (ApplyDelta reports them as already applied) and never applies one
// twice. A stream records its operations only once a consumer has asked
// for its delta: where nothing persists or replicates, none is recorded,
// and the first Delta of a stream answers with the whole value.
package stream
