package commands

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/armon/go-radix"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/resp"
)

// client is the per-connection state. Fields without a comment are used
// only by the connection's own goroutine.
type client struct {
	conn *resp.Conn
	x    ctx // reused for every command of this connection

	db     atomic.Int32 // SELECTed database; read by CLIENT LIST
	authed bool         // AUTH done, or no password configured
	// resp3 is set by HELLO 3 and cleared by HELLO 2 and RESET: the reply
	// helpers then write RESP3's types (maps, sets, nulls, verbatim
	// strings). Read by CLIENT LIST (resp=), hence atomic.
	resp3  atomic.Bool
	denied bool // protected mode refuses this client
	// shard is the statistics' shard this client counts in (its event
	// loop's); 16 bits fit in the padding after denied.
	shard uint16
	// pendingSeq is the persistence sequence this client's replies wait
	// for (fsync always); 0 when nothing is pending.
	pendingSeq uint64
	lower      [32]byte             // scratch for lower-casing command names
	num        [20]byte             // scratch for a number GET shows (withString)
	leases     limiter.Leases       // scratch for packed CL.ACQUIRE state (leasesOf)
	checks     [4]check             // CL.ALL's parsed checks (cmdAll)
	polBuf     []byte               // CL.APPLY's derived keys (applyKeys)
	lastCmd    atomic.Pointer[Spec] // read by CLIENT LIST

	// Clock readings (see ctx.clockNS and Service.call), in ns: the wall
	// clock's offset from the monotonic one, as of baseMono; and the end
	// of the last command, with the input read it came from.
	baseWall, baseMono int64
	lastEnd            time.Duration
	lastBatch          uint64

	// repl is what the client announced with REPLCONF (a replica);
	// replOff is the replication offset after its last write command
	// (what WAIT waits for).
	repl    replState
	replOff int64

	readonly bool // READONLY: a replica may serve this client's reads (cluster mode)

	inMulti    bool
	multiBad   bool // a command failed to queue: EXEC aborts
	queue      []queued
	queueBytes int64        // queuedSize of queue
	multiMem   atomic.Int64 // queueBytes, read by CLIENT LIST
	multiSeen  atomic.Int32 // queued commands, -1 outside MULTI; read by CLIENT LIST

	watched    []*watchedKey // WATCHed keys, registered in Service.watch
	watchBytes int64         // their cost against Config.MultiMaxBytes
	// dirty: a watched key changed, EXEC will abort (Redis's
	// CLIENT_DIRTY_CAS). Set by whichever client changes the key.
	dirty atomic.Bool

	// trk holds the tracking flags (trkOn, ...); written by this client
	// (under Service.track.mu for on/off), read by whichever client
	// changes a key it tracks. trkPrefixes are its BCAST prefixes (keys
	// of a radix tree, nil before any; guarded by Service.track.mu; read
	// by this client's CLIENT TRACKING and TRACKINGINFO).
	trk         atomic.Uint32
	trkPrefixes *radix.Tree
	// noloop mirrors trkNoloop for ctx.lockShards; held, heldMore and
	// heldAll say which shard locks (or every one, in EXEC) this NOLOOP
	// client holds, so that a change under one is known as its own
	// (writer).
	noloop   bool
	held     [heldInline]atomic.Pointer[keyspace.Shard]
	heldMore atomic.Pointer[[]*keyspace.Shard]
	heldAll  atomic.Bool

	// Buffers for commands with more keys than the context holds
	// (keys.go): key positions, resolved keys, shards to lock, a
	// transaction's keys, and a bitmap of one database's shards.
	pos      []int
	keyMore  []rkey
	lockMore []*keyspace.Shard
	execKeys []execKey
	marks    []uint64
	bigKeys  bool // one of these was used by the command (ctx.doneKeys)
	// redir is the REDIRECT target (redirID its id, 0: none);
	// redirBroken: it had gone at an invalidation. closed: the
	// connection has ended (Service.Close), for clients redirecting to it.
	redir       atomic.Pointer[client]
	redirID     atomic.Int64
	redirBroken atomic.Bool
	closed      atomic.Bool
	// blocked is the client's block counted in blocked_clients (nil:
	// none; blocked.go).
	blocked atomic.Pointer[blockedCall]
	// killed: CLIENT KILL closed the connection, which CLIENT LIST and
	// CLIENT KILL no longer count while it ends.
	killed atomic.Bool

	subs subscriptions // pub/sub channels and patterns (cmd_pubsub.go)

	mu      sync.Mutex // guards name, libName, libVer
	name    string
	libName string
	libVer  string
}

// ctx is the execution context of one command. Reply helpers append to the
// connection's output buffer with redcon's appenders.
type ctx struct {
	s    *Service
	c    *resp.Conn
	cl   *client
	spec *Spec
	args [][]byte

	// keys are the command's keys, resolved by the dispatcher (keys.go);
	// locks are the shards whose locks it took for them.
	keys  []rkey
	locks []*keyspace.Shard
	pre   []execKey // hashes and slots of the keys resolveKeys finds (EXEC)
	kbuf  [inlineKeys]rkey
	lbuf  [inlineKeys]*keyspace.Shard

	nowNS   int64 // the command's clock reading, valid when haveNow
	haveNow bool
	locked  bool // every shard lock is held (inside EXEC)
	inExec  bool // EXEC holds the locks the command needs
	heldSet bool // locks are published in client.held (NOLOOP)
	failed  bool // an error reply was written

	// CL.APPLY (applyKeys): the policies pinned for the command (EXEC:
	// for the transaction), and the policy it names (nil if unknown).
	polSet *policy.Set
	pol    *policy.Policy
}

// clockNS returns the command's time in ns since the Unix epoch, reading the
// clock at most once per command.
func (x *ctx) clockNS() int64 {
	if !x.haveNow {
		if x.s.realClock {
			x.nowNS = x.cl.wallNS(x.s.monoBase)
		} else {
			x.nowNS = x.s.clock().UnixNano()
		}
		x.haveNow = true
	}
	return x.nowNS
}

// clockRebase is how long a client derives the wall clock from the
// monotonic clock before reading both again.
const clockRebase = int64(time.Millisecond)

// wallNS returns the wall clock in ns since the Unix epoch with one read of
// the monotonic clock: time.Now reads both clocks, and the clock reads were
// the largest cost of a pipelined CL.THROTTLE after the network and the
// lookup. The wall clock is the monotonic reading plus the offset between
// the two clocks, which the client takes from time.Now again every
// millisecond: between two such readings the offset moves only by NTP's
// slewing (at most 0.5 µs per ms), and a step of the wall clock is seen
// within a millisecond.
func (cl *client) wallNS(monoBase time.Time) int64 {
	m := int64(time.Since(monoBase))
	if cl.baseMono == 0 || m-cl.baseMono >= clockRebase || m < cl.baseMono {
		t := time.Now()
		cl.baseWall, cl.baseMono = t.UnixNano(), int64(t.Sub(monoBase))
		return cl.baseWall
	}
	return cl.baseWall + (m - cl.baseMono)
}

// clockMS is clockNS in whole milliseconds (floor), the unit of expiries.
func (x *ctx) clockMS() int64 { return floorDiv(x.clockNS(), 1e6) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func (x *ctx) db() *keyspace.DB { return x.s.ks.DB(int(x.cl.db.Load())) }

// lock takes the shard lock unless the whole keyspace is already held:
// commands that visit every shard (WholeKeyspace) lock one at a time.
func (x *ctx) lock(sh *keyspace.Shard) {
	if !x.locked {
		sh.Lock()
		if x.cl.noloop {
			x.cl.held[0].Store(sh)
		}
	}
}

func (x *ctx) unlock(sh *keyspace.Shard) {
	if !x.locked {
		if x.cl.noloop {
			x.cl.held[0].Store(nil)
		}
		sh.Unlock()
	}
}
