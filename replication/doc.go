// Package replication keeps replicas of a cellserver node: a primary
// streams every change to its keys to its replicas, which apply them and
// serve reads (and Sentinel promotes one when the primary fails).
//
// # Model
//
// A Replication is one node's replication state. A node is a primary
// (New returns one) or a replica of one primary (ReplicaOf; NoOne makes it
// a primary again, keeping its data). Replication is by value, never by
// command: the stream carries each key's new value, with its absolute
// expiry, or its deletion, or a flush, in the order the keys changed; the
// same changes persistence writes. A replica applies them as they are and
// never runs a limiter command or decides with its own clock, so its
// limiter state (TATs, window counts, logs, leases) is the primary's byte
// for byte. It deletes nothing by itself either: an expired key is hidden
// from reads at the replica's clock but kept until the primary's deletion
// arrives, and a replica neither sweeps nor evicts.
//
// A primary sees its changes through Journal, one link of the keyspace's
// journal chain (server.New composes it): under the changed key's shard
// lock, each change is encoded as a frame and appended to the backlog, and
// the replicas' senders are woken. A replica applies its primary's frames
// to the keyspace (through the same chain: persistence, WATCH and
// client-side caching see them) and appends the frames, as they arrived,
// to its own backlog, for its own replicas (chained replication).
//
// # The stream
//
// The stream is a sequence of frames: a type byte, a uvarint payload
// length, the payload (stream.go lists the types). The change frames (put,
// delete, flush one database, flush all, keepalive) are the replication
// stream proper: the backlog holds them byte for byte and the offsets count
// their bytes. A full copy adds entries and an end frame, which are not
// counted, and a replica sends only acknowledgements. Values are encoded as
// persistence encodes them (persistence.EncodeValue).
//
// Version 2 of the stream splits any payload longer than 64 KiB into
// continuation frames, so that no frame exceeds 64 KiB of payload whatever
// a value holds. Version 3 adds deltas: the put frame of a stream changed
// in place carries what changed (persistence.EncodeChange), which the
// replica applies to its copy; a delta that does not apply drops the link
// and the next sync is a full copy. A replica announces every version
// (REPLCONF capa cellserver-values-1, cellserver-values-2 and Capability,
// "cellserver-values-3"); a primary refuses PSYNC from a client without
// Capability, so neither a Redis replica nor an older cellserver attaches
// to it, while a replica follows a primary of any version: upgrade
// replicas before their primary. A
// replica refuses a frame larger than Config.MaxFrame plus FrameOverhead
// (the server's proto-max-bulk-len) before reading it, drops the link and
// syncs again in full (ErrFrameTooLarge); with Config.MaxChange (the
// server's maxmemory) it refuses the same way a split change whose parts
// would pass it (ErrChangeTooLarge).
//
// # Synchronisation
//
// A replica connects to its primary (over TLS with Config.TLS), then
// sends AUTH (with Config.MasterAuth), PING, REPLCONF listening-port,
// ip-address, capa and node-id, and PSYNC with its replication ID and
// offset, as Redis's replicas do. The primary answers (Psync):
//
//   - "+CONTINUE <replid>" when its backlog still holds what follows the
//     replica's offset, under its current replication ID or, up to the
//     offset where it ended, its previous one (a promoted replica keeps its
//     old primary's ID as its second, so that the other replicas of that
//     primary continue from it): the stream follows from there (partial
//     resync);
//   - "+FULLRESYNC <replid> <offset>" otherwise: the replica drops every
//     key it had and receives a full copy, shard by shard, each shard
//     locked only while its entries are encoded, with the stream's changes
//     interleaved. The copy is not a point-in-time image, but as every
//     change carries a whole value, the replica equals the primary once it
//     has applied the stream up to the copy's end frame; only then is its
//     link up (LinkUp) and does the primary count it as online.
//
// The backlog (backlog.go) is a ring of Config.BacklogSize bytes, the last
// bytes of the stream; offsets count every byte the stream ever held. It
// starts recording when a first replica comes, so a primary that never
// had one encodes nothing.
//
// # Acknowledgements, WAIT and min-replicas
//
// A replica acknowledges its applied offset whenever it has applied all
// it has read and the offset moved, at most once per millisecond. The
// primary's keepalive, a change frame it sends every second while it has
// replicas, moves every offset, so each replica acknowledges at least
// that often. A primary counts an acknowledgement as at most the offset
// it has written to that replica, so a replica is never counted for data
// it was not sent. Wait (WAIT) sends a keepalive at once, to be
// acknowledged without waiting for the next, and answers once enough
// online replicas acknowledged the offset, on timeout, or when the node
// stops being a primary; Acked counts them now.
// GoodReplicas counts the online replicas acknowledged within a lag, which
// the commands layer compares with min-replicas-to-write before each
// write.
//
// # Acknowledged replication (sync-replicas)
//
// With SetSync(n, timeout) and n >= 1 (the server's --sync-replicas and
// --sync-replicas-timeout), a primary's commands layer holds the reply of
// every command that changed a key (the keyspace's shard change counts
// tell; a refused CL.THROTTLE, reads and CL.PEEK change nothing and are
// not held) until n online replicas have acknowledged the stream up to
// that change: the event loop keeps the connection's replies and serves
// other clients meanwhile, as for fsync always, and a connection without a
// loop waits in BeforeWrite (WaitSync). Hold registers a batch of replies
// with its deadline: while any is registered, each sender writes at once
// instead of gathering for 500 µs and ends its write with a 'G' frame,
// which a replica that announced CapaGetAck answers with an
// acknowledgement at once instead of within its 1 ms gathering. Acked
// offsets are monotonic while the node stays a primary: SyncAcked(off)
// holds once n replicas have acknowledged off, even if one leaves later.
// A reply still unacknowledged at its deadline leaves as NOREPLICAS (the
// change stays applied here) and starts the fence: SyncFenced is true,
// and the commands layer refuses every write at once with NOREPLICAS,
// until n replicas have acknowledged the offset of the moment the fence
// started; it is also true whenever fewer than n replicas are online. A
// role change forgets what was acknowledged (replies still held leave as
// NOREPLICAS) and ends the fence.
//
// Why no admission a client saw is forgotten by a failover (the limiter
// then never admits more than its limit through one), under these
// conditions: every node runs with the same sync-replicas n; the stream is
// applied in order, so a replica that acknowledged offset o has every
// change before o; Sentinel promotes, among the replicas it reaches, the
// one with the largest replication offset, whose stream is then a superset
// of every other reachable replica's.
//
//  1. A client sees a change's success only after n replicas acknowledged
//     an offset at or past it: a reply held is sent as it is only if
//     SyncAcked(its offset) when it leaves; every other outcome is
//     NOREPLICAS, which tells the client the change did not count (the
//     limiter may under-admit, by the changes applied and refused; never
//     over-admit).
//  2. So each change a client saw succeed is on n replicas. If Sentinel
//     reaches one of them when it fails over, the promoted replica, having
//     the largest offset, has that change too. With n = 1 and two replicas,
//     Sentinel must reach the acknowledging one: losing the primary and
//     that replica at once (or partitioning both from Sentinel) can lose
//     the change. In general, losing the primary and n replicas at once
//     can.
//  3. A primary cut off from its replicas (a partition that leaves its
//     clients reaching it) admits nothing after the cut that a client
//     sees: nothing it changes is acknowledged, so every reply becomes
//     NOREPLICAS within the timeout, and the fence refuses every later
//     write at once. Its changes after the cut are lost at the failover,
//     but no client counted them.
//  4. A promoted replica starts with no replicas: it is fenced until
//     Sentinel has pointed the others at it and n of them have synced, so
//     the time without admissions after a failover is Sentinel's failover
//     plus one sync.
//
// Changes of a primary without sync-replicas are asynchronous: a failover
// loses what its replicas had not received (after kill -9, about the last
// millisecond), and a partitioned primary keeps admitting until it learns
// of the failover, which its promoted replica does not know of.
//
// # Limits and loops
//
// Replica links count towards the server's maxclients
// (Config.MaxReplicas): past it PSYNC is refused (ErrMaxReplicas). A node
// names itself to its primary (REPLCONF node-id, NodeID) and the primary
// answers with its own ID and those of the primaries above it (Hello); a
// node refuses a replica that is itself or one of its primaries, and a
// replica refuses to follow a primary that lists it, so that two nodes
// made replicas of each other do not feed each other (ErrLoop).
//
// # Concurrency
//
// Replication is safe for concurrent use. Its mutex guards the role and
// the replicas' registration; blMu guards the backlog and is taken after
// the shard locks of the change being recorded or applied, which is what
// keeps the stream in the order the keys changed. Each replica's link has
// a sender goroutine (gathering changes for 500 µs before it writes) and
// a goroutine reading its acknowledgements; a replica runs one goroutine
// applying the stream and one acknowledging it.
package replication
