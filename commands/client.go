package commands

import (
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/resp"
)

// client is the per-connection state, grouped by the file that owns it.
// Fields without a comment are used only by the connection's own
// goroutine.
type client struct {
	conn *resp.Conn
	x    ctx // reused for every command of this connection

	// The connection (cmd_connection.go).
	db     atomic.Int32 // SELECTed database; read by CLIENT LIST
	authed bool         // AUTH done, or no password configured
	denied bool         // protected mode refuses this client
	// user is the ACL user the client runs as (acl.go); read by CLIENT
	// LIST and CLIENT KILL from other clients.
	user atomic.Pointer[aclUser]
	// readonly: READONLY, a replica may serve this client's reads
	// (cluster mode; cmd_cluster.go).
	readonly bool
	// monitor: in monitor mode (MONITOR; cmd_monitor.go). Set and read on
	// the connection's goroutine only.
	monitor bool
	// shard is the statistics' shard this client counts in (its event
	// loop's); 16 bits fit in the padding after readonly.
	shard uint16
	// pendingSeq is the persistence sequence this client's replies wait
	// for (fsync always); 0 when nothing is pending (Service.BeforeWrite).
	pendingSeq uint64
	scratch    clientScratch
	lastCmd    atomic.Pointer[Spec] // read by CLIENT LIST
	clock      clientClock          // ctx.clockNS and Service.call

	repl   replState   // REPLCONF, and WAIT's offset (cmd_replication.go)
	sync   syncReplies // replies held for sync-replicas (cmd_replication.go)
	multi  multiState  // MULTI's queue and WATCHed keys (cmd_transactions.go)
	track  trackState  // client-side caching (cmd_tracking.go)
	keyBuf keyBufs     // keys beyond the context's inline arrays (keys.go)
	// blocked is the client's block counted in blocked_clients (nil:
	// none; blocked.go).
	blocked atomic.Pointer[blockedCall]
	// closed: the connection has ended (Service.Close), for clients
	// redirecting to it and lease waiters. killed: CLIENT KILL closed it,
	// which CLIENT LIST and CLIENT KILL no longer count while it ends.
	closed atomic.Bool
	killed atomic.Bool

	pubsub subscriptions // pub/sub channels and patterns (cmd_pubsub.go)
	// migSource: this connection carries a slot migration from that
	// source node into this one (CELLCLUSTER MIGRATE-START).
	migSource string
	meta      clientMeta // CLIENT SETNAME and SETINFO (cmd_connection.go)
	// extAudit is the audit of the limiter command being run by
	// Local.SendAudited (an Envoy rate limit rule's); nil otherwise.
	extAudit  *policy.Policy
	extClient string // and the entries' client field
}

// clientScratch is the client's reusable buffers, so that the hot paths
// do not allocate.
type clientScratch struct {
	lower  [32]byte       // for lower-casing command names (Service.lookup)
	num    [20]byte       // a number GET shows (withString)
	leases limiter.Leases // packed CL.ACQUIRE state (leasesOf)
	checks [4]check       // CL.ALL's parsed checks (cmdAll)
	polBuf []byte         // CL.APPLY's derived keys (applyKeys)
	audit  auditScratch   // CL.APPLY's audit entry (cl_audit.go)
}

// clientClock is the client's clock readings (see ctx.clockNS and
// Service.call), in ns: the wall clock's offset from the monotonic one,
// as of baseMono; and the end of the last command, with the input read it
// came from.
type clientClock struct {
	baseWall, baseMono int64
	lastEnd            time.Duration
	lastBatch          uint64
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
	// trackChg: sync-replicas needs to know whether the command changes
	// a key (runLocked, cmdExec set changed).
	trackChg bool
	changed  bool

	// CL.APPLY (applyKeys): the policies pinned for the command (EXEC:
	// for the transaction), and the policy it names (nil if unknown).
	polSet *policy.Set
	pol    *policy.Policy

	// auditKey: the command's last key is an audit stream's, added by
	// applyKeys or addExtAuditKey (cl_audit.go). auditLock is its shard
	// when runLocked left that lock to the audit (lazyAudit), auditHeld
	// the shard once the audit took it. auditRedoable: the command can
	// be run again if that lock, out of the lock order, is busy
	// (auditRedo: it was). auditDraw: audit_sample's draw for the
	// command (auditUnknown until drawn; kept when it runs again).
	auditKey, auditRedoable, auditRedo bool
	auditDraw                          int8
	auditLock, auditHeld               *keyspace.Shard
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
	if cl.clock.baseMono == 0 || m-cl.clock.baseMono >= clockRebase || m < cl.clock.baseMono {
		t := time.Now()
		cl.clock.baseWall, cl.clock.baseMono = t.UnixNano(), int64(t.Sub(monoBase))
		return cl.clock.baseWall
	}
	return cl.clock.baseWall + (m - cl.clock.baseMono)
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
		if x.cl.track.noloop {
			x.cl.track.held[0].Store(sh)
		}
	}
}

func (x *ctx) unlock(sh *keyspace.Shard) {
	if !x.locked {
		if x.cl.track.noloop {
			x.cl.track.held[0].Store(nil)
		}
		sh.Unlock()
	}
}

// resp3 reports whether the client negotiated RESP3 (HELLO 3; HELLO 2
// and RESET return to RESP2): the reply helpers then write RESP3's types
// (maps, sets, nulls, verbatim strings). The protocol is the connection's
// (resp.Conn.Protocol), read by CLIENT LIST (resp=) and by the clients
// that push to this one.
func (cl *client) resp3() bool { return cl.conn.Protocol() == resp.RESP3 }
