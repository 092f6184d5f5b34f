package replication

import (
	"cmp"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/keyspace"
)

// DefaultBacklogSize is the default of Config.BacklogSize (16 MiB): at a
// few dozen bytes per change, about half a million changes, a few
// seconds of a busy primary, within which a replica that lost its link
// resumes without a full copy.
const DefaultBacklogSize = 16 << 20

// DefaultPriority is the default of Config.Priority, as Redis's
// replica-priority.
const DefaultPriority = 100

// pingPeriod is how often a primary with replicas sends a keepalive, and
// how often a replica acknowledges its offset when nothing else arrives.
const pingPeriod = time.Second

// linkTimeout is how long a replica waits for any byte from its primary
// before it drops the link (Redis's repl-timeout), and bounds the dial and
// handshake.
const linkTimeout = 60 * time.Second

// retryPeriod is how long a replica waits between two attempts to connect
// to its primary.
const retryPeriod = time.Second

// Config configures replication. The zero value is valid except Keyspace.
type Config struct {
	Keyspace *keyspace.Keyspace
	// BacklogSize is the size of the backlog in bytes; the default value
	// (zero) is DefaultBacklogSize.
	BacklogSize int64
	// Port is this node's client port, which a replica reports to its
	// primary (REPLCONF listening-port) unless AnnouncePort is set.
	Port int
	// AnnounceIP and AnnouncePort, if set, are the address a replica
	// reports to its primary (replica-announce-ip, replica-announce-port):
	// the primary lists it in INFO, where Sentinel discovers replicas.
	AnnounceIP   string
	AnnouncePort int
	// MasterUser and MasterAuth authenticate a replica to its primary.
	MasterUser, MasterAuth string
	// TLS, if not nil, is used to dial the primary.
	TLS *tls.Config
	// Logger receives one line per role change and link event.
	Logger *slog.Logger
	// Clock is the wall clock (lag, link-down times); default time.Now.
	Clock func() time.Time
	// WaitRoom, if set, is called by a replica before it applies each
	// change from its primary: with persistence, it waits while the
	// write queue is over its cap (persistence.Writer.WaitRoom), so the
	// replica stops reading the stream and TCP holds the primary back.
	WaitRoom func()
	// MaxFrame bounds, with FrameOverhead, the payload of one frame a
	// replica accepts from its primary (the server's proto-max-bulk-len;
	// the default value, zero, is DefaultMaxFrame). A larger frame is
	// refused before it is read: the replica drops the link and syncs
	// again in full. A primary splits its frames at 64 KiB, so only a
	// primary of the first stream version, or a broken one, sends more.
	MaxFrame int64
	// MaxChange, when positive, bounds the joined size of one change a
	// replica accepts split into frames (the server's maxmemory: a value
	// larger than the whole memory cap is not one to keep). The 'C' frame
	// that would pass it is refused before it is read, as a frame past
	// MaxFrame is. Zero: no bound (a primary is trusted to send values it
	// holds; legitimate values may be far larger than MaxFrame).
	MaxChange int64
	// MaxReplicas caps the replicas' links at once (the server's
	// maxclients: replicas are clients, as in Redis); PSYNC past it is
	// refused with ErrMaxReplicas. Zero means no cap.
	MaxReplicas int
}

// Replication is one node's replication state: its role, its backlog,
// the link to its primary when it is a replica, and the links of its own
// replicas. It is safe for concurrent use.
type Replication struct {
	ks       *keyspace.Keyspace
	log      *slog.Logger
	clock    func() time.Time
	cfg      Config
	size     int64
	maxFrame uint64 // Config.MaxFrame + FrameOverhead
	nodeID   string // this node's identity in REPLCONF node-id
	dialer   func(addr string) (net.Conn, error)
	stopping atomic.Bool

	mu           sync.Mutex // guards the fields below and the replicas' registration
	replID       string
	replID2      string
	secondOffset int64 // -1: none
	link         *link // non-nil while a replica
	replicas     []*replicaConn
	// handover are the syncs answered and not yet served (their
	// connection being handed over by the connection layer), each until
	// its deadline: they count as links, so that replicas arriving
	// together cannot pass MaxReplicas.
	handover []*Sync
	// upstream is what this node's primary answered to REPLCONF node-id
	// at the last sync: its node ID and those of the primaries above
	// it. A replica with one of these IDs is refused (ErrLoop).
	upstream []string
	waiters  []*waiter
	nWaiters atomic.Int32

	nLinks  atomic.Int32                   // len(replicas) + len(handover), readable without mu
	port    atomic.Int32                   // Config.Port, or SetPort's
	replica atomic.Bool                    // link != nil, readable without mu
	senders atomic.Pointer[[]*replicaConn] // replicas, readable without mu

	// blMu guards the backlog, the encoding buffer, the replication IDs
	// and the links' dead flags. Changes are
	// appended under it while their shard lock is held, so the stream's
	// order is the order in which each key changed.
	blMu      sync.Mutex
	bl        ring
	blActive  bool
	scratch   []byte
	recording atomic.Bool  // primary with an active backlog: changes are appended
	offset    atomic.Int64 // bl.end, readable without blMu

	syncFull, syncPartialOK, syncPartialErr atomic.Int64
	fullSyncsDone                           atomic.Int64 // full copies received (as a replica)

	sync syncState // sync-replicas (sync.go)
}

// New returns a primary with no replicas.
func New(cfg Config) (*Replication, error) {
	if cfg.Keyspace == nil {
		return nil, errors.New("replication: no keyspace")
	}
	cfg.BacklogSize = cmp.Or(cfg.BacklogSize, DefaultBacklogSize)
	if cfg.BacklogSize < 16<<10 || cfg.BacklogSize > 1<<40 {
		return nil, errors.New("replication: the backlog size must be between 16kb and 1tb")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.MaxFrame = cmp.Or(cfg.MaxFrame, DefaultMaxFrame)
	if cfg.MaxFrame < 0 || cfg.MaxReplicas < 0 {
		return nil, errors.New("replication: MaxFrame and MaxReplicas must not be negative")
	}
	r := &Replication{ks: cfg.Keyspace, log: cfg.Logger, clock: cfg.Clock, cfg: cfg, size: cfg.BacklogSize,
		maxFrame: uint64(min(cfg.MaxFrame, 1<<50)) + FrameOverhead, nodeID: newID(),
		replID: newID(), replID2: zeroID, secondOffset: -1}
	r.port.Store(int32(cfg.Port))
	r.dialer = r.dial
	r.sync.timeout.Store(int64(DefaultSyncTimeout))
	return r, nil
}

const zeroID = "0000000000000000000000000000000000000000"

func newID() string {
	var b [20]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run sends keepalives to the replicas and times out WAITs until stop is
// closed; then it drops every link.
func (r *Replication) Run(stop <-chan struct{}) {
	t := time.NewTicker(pingPeriod)
	defer t.Stop()
	for {
		select {
		case <-stop:
			r.Close()
			return
		case <-t.C:
			r.cron()
		}
	}
}

// cron runs every pingPeriod: a primary with replicas appends a keepalive
// to the stream (it counts in the offsets, as Redis's PING does).
func (r *Replication) cron() {
	r.mu.Lock()
	n := len(r.replicas)
	r.mu.Unlock()
	if n > 0 {
		r.record(framePing, 0, nil, nil)
	}
}

// Close drops the link to the primary and every replica's link.
func (r *Replication) Close() {
	r.stopping.Store(true)
	r.mu.Lock()
	l := r.link
	reps := slices.Clone(r.replicas)
	r.mu.Unlock()
	if l != nil {
		r.blMu.Lock()
		l.kill()
		r.blMu.Unlock()
		l.stop()
		select {
		case <-l.exited:
		case <-time.After(time.Second):
		}
	}
	for _, rc := range reps {
		rc.close()
	}
	r.answerWaiters()
	r.resetSync()
}

// appendLocked appends complete change frames to the backlog. blMu held.
func (r *Replication) appendLocked(frames []byte) {
	r.bl.write(frames)
	r.offset.Store(r.bl.end)
}

// Journal returns the keyspace.Journal that feeds the backlog: while the
// node is a primary with an active backlog (it has had a replica), each
// change is encoded as its frame and appended, and the replicas' senders
// woken. The keyspace's owner puts it in the keyspace's journal chain
// (server.New); a keyspace whose journal lacks it gives replicas nothing
// but keepalives.
func (r *Replication) Journal() keyspace.Journal { return journal{r} }

// journal is Journal's keyspace.Journal.
type journal struct{ r *Replication }

func (j journal) Put(db int, key []byte, v *keyspace.Value) { j.r.record(framePut, db, key, v) }
func (j journal) Delete(db int, key []byte)                 { j.r.record(frameDelete, db, key, nil) }
func (j journal) DeleteDB(db int)                           { j.r.record(frameFlushDB, db, nil, nil) }
func (j journal) DeleteAll()                                { j.r.record(frameFlushAll, 0, nil, nil) }

// record appends the frame of one change (or a keepalive, framePing) to
// the backlog and wakes the senders, if the node is a primary recording
// changes. It takes blMu: callers hold the change's shard locks, which
// come first.
func (r *Replication) record(t byte, db int, key []byte, v *keyspace.Value) {
	if !r.recording.Load() {
		return
	}
	r.blMu.Lock()
	switch t {
	case framePut:
		r.scratch = appendPut(r.scratch[:0], framePut, db, key, v)
	case frameDelete:
		r.scratch = appendDelete(r.scratch[:0], db, key)
	case frameFlushDB:
		r.scratch = appendFlushDB(r.scratch[:0], db)
	default: // frameFlushAll, framePing
		r.scratch = appendEmpty(r.scratch[:0], t)
	}
	if r.recording.Load() { // again: ReplicaOf stops it under blMu
		r.appendLocked(r.scratch)
	}
	r.shrinkScratch()
	r.blMu.Unlock()
	r.wakeSenders()
}

// shrinkScratch drops an encoding buffer a huge value grew. blMu held.
func (r *Replication) shrinkScratch() {
	if cap(r.scratch) > 1<<20 {
		r.scratch = nil
	}
}

// NodeID returns this node's identity in the handshake of a replica
// with its primary (REPLCONF node-id): 40 hex digits, random for each
// process.
func (r *Replication) NodeID() string { return r.nodeID }

// Hello answers a replica that names itself node (REPLCONF node-id): with
// this node's ID and those of the primaries above it ("+OK" then IDs, for
// the replica to check and to pass on to its own replicas), or ErrLoop
// when node is this node or one of its primaries: replicating from it
// would make a loop.
func (r *Replication) Hello(node string) (ids string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLoopLocked(node); err != nil {
		return "", err
	}
	chain := append([]string{r.nodeID}, r.upstream[:min(len(r.upstream), maxChain-1)]...)
	return strings.Join(chain, " "), nil
}

// checkLoopLocked refuses node as a replica when it is this node or one of
// its primaries. r.mu held.
func (r *Replication) checkLoopLocked(node string) error {
	if node == "" {
		return nil
	}
	if node == r.nodeID || slices.Contains(r.upstream, node) {
		r.log.Warn("replication: refused a replica that this node replicates from (directly or through other replicas), or this node itself: it would make a loop",
			"replica_node_id", node)
		return ErrLoop
	}
	return nil
}

// setUpstream records the primaries a sync's handshake named and reports
// whether they changed. r.mu held.
func (r *Replication) setUpstream(chain []string) bool {
	if slices.Equal(chain, r.upstream) {
		return false
	}
	r.upstream = slices.Clone(chain)
	return true
}

// Links returns the replicas' links, those being handed over included:
// they count towards maxclients.
func (r *Replication) Links() int {
	if r.nLinks.Load() == 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneHandoverLocked()
	return len(r.replicas) + len(r.handover)
}

// SetPort sets the client port a replica reports to its primary (when
// the node listens on a port chosen at run time).
func (r *Replication) SetPort(p int) { r.port.Store(int32(p)) }

// Offset returns the replication offset: the bytes of change stream this
// node has produced (primary) or applied (replica).
func (r *Replication) Offset() int64 { return r.offset.Load() }

// IsReplica reports whether the node follows a primary.
func (r *Replication) IsReplica() bool { return r.replica.Load() }

// activateBacklog starts recording changes (a first replica arrives).
// r.mu held.
func (r *Replication) activateBacklog() {
	r.blMu.Lock()
	if !r.blActive {
		r.blActive = true
		end := r.bl.end
		r.bl.reset(r.size, end)
	}
	r.blMu.Unlock()
	if r.link == nil {
		r.recording.Store(true)
	}
}

// ReplicaOf makes the node a replica of host:port at once (INFO shows
// role:slave with the link down until the first sync completes). It
// reports already when it follows that primary already. Existing data is
// kept until a full copy replaces it.
func (r *Replication) ReplicaOf(host string, port int) (already bool) {
	r.mu.Lock()
	old := r.link
	if old != nil && old.host == host && old.port == port {
		r.mu.Unlock()
		return true
	}
	wasPrimary := old == nil
	l := newLink(r, host, port)
	r.blMu.Lock()
	if old != nil {
		old.kill()
	}
	r.recording.Store(false)
	r.blMu.Unlock()
	r.ks.SetReplica(true)
	r.link = l
	r.upstream = nil // until the new primary answers
	r.replica.Store(true)
	r.mu.Unlock()
	if old != nil {
		old.stop()
	}
	r.answerWaiters() // WAIT is for primaries
	r.resetSync()
	if wasPrimary {
		r.log.Info("replication: role change: primary -> replica", "primary", net.JoinHostPort(host, strconv.Itoa(port)))
	} else {
		r.log.Info("replication: role change: replica -> replica of a new primary", "primary", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	go l.run()
	return false
}

// NoOne makes the node a primary (REPLICAOF NO ONE): it keeps its data,
// takes a new replication ID and keeps counting from its offset, so that
// replicas of its former primary can continue from it (partial resync).
// Its own replicas are disconnected and resync partially.
func (r *Replication) NoOne() {
	r.mu.Lock()
	l := r.link
	if l == nil {
		r.mu.Unlock()
		return
	}
	r.link = nil
	r.upstream = nil
	r.replica.Store(false)
	r.blMu.Lock()
	l.kill()
	r.replID2 = r.replID
	r.secondOffset = r.bl.end + 1
	r.replID = newID()
	active := r.blActive
	r.blMu.Unlock()
	r.ks.SetReplica(false)
	r.recording.Store(active)
	reps := slices.Clone(r.replicas)
	r.mu.Unlock()
	l.stop()
	for _, rc := range reps {
		rc.close()
	}
	r.resetSync()
	r.log.Info("replication: role change: replica -> primary", "replid", r.ReplID(), "offset", r.Offset())
}

// ReplID returns the current replication ID.
func (r *Replication) ReplID() string {
	r.blMu.Lock()
	defer r.blMu.Unlock()
	return r.replID
}

// ReplicaOfSetting returns "host port" of the primary, or "" for a
// primary (CONFIG REWRITE's replicaof).
func (r *Replication) ReplicaOfSetting() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.link == nil {
		return ""
	}
	return r.link.host + " " + strconv.Itoa(r.link.port)
}

// LinkUp reports, for a replica, whether it is in sync with its primary
// (master_link_status:up); a primary reports true.
func (r *Replication) LinkUp() bool {
	r.mu.Lock()
	l := r.link
	r.mu.Unlock()
	return l == nil || l.state.Load() == stateConnected
}

// KillLinks closes the replication links of one kind (CLIENT KILL TYPE
// master|replica|slave) and returns how many. A killed link to the
// primary reconnects after a second, as in Redis.
func (r *Replication) KillLinks(kind string) int {
	switch kind {
	case "master":
		r.mu.Lock()
		l := r.link
		r.mu.Unlock()
		if l != nil && l.dropConn() {
			return 1
		}
		return 0
	case "replica", "slave":
		r.mu.Lock()
		reps := slices.Clone(r.replicas)
		r.mu.Unlock()
		for _, rc := range reps {
			rc.close()
		}
		return len(reps)
	}
	return 0
}

// Stats are the replication figures for INFO and the metrics.
type Stats struct {
	Replica           bool
	LinkUp            bool
	Offset            int64
	ConnectedReplicas int
	// MaxLagBytes and MaxLagSeconds: the largest lag of an online
	// replica behind this primary's offset, by its last acknowledgement.
	MaxLagBytes   int64
	MaxLagSeconds float64
	// LinkDownSeconds: a replica's time without a link (0 when up).
	LinkDownSeconds                         float64
	SyncFull, SyncPartialOK, SyncPartialErr int64
	FullSyncsReceived                       int64
}

// Stats returns the current figures.
func (r *Replication) Stats() Stats {
	now := r.clock()
	st := Stats{Offset: r.Offset(), SyncFull: r.syncFull.Load(), SyncPartialOK: r.syncPartialOK.Load(),
		SyncPartialErr: r.syncPartialErr.Load(), FullSyncsReceived: r.fullSyncsDone.Load()}
	r.mu.Lock()
	l := r.link
	st.ConnectedReplicas = len(r.replicas)
	for _, rc := range r.replicas {
		if !rc.online.Load() {
			continue
		}
		st.MaxLagBytes = max(st.MaxLagBytes, st.Offset-rc.ack.Load())
		st.MaxLagSeconds = max(st.MaxLagSeconds, now.Sub(time.Unix(0, rc.ackTime.Load())).Seconds())
	}
	r.mu.Unlock()
	st.LinkUp = true
	if l != nil {
		st.Replica = true
		st.LinkUp = l.state.Load() == stateConnected
		if !st.LinkUp {
			if d := l.downSince.Load(); d != 0 {
				st.LinkDownSeconds = now.Sub(time.Unix(0, d)).Seconds()
			}
		}
	}
	return st
}

// GoodReplicas returns the online replicas whose last acknowledgement is
// at most maxLag old (min-replicas-to-write).
func (r *Replication) GoodReplicas(maxLag time.Duration) int {
	now := r.clock().UnixNano()
	n := 0
	r.mu.Lock()
	for _, rc := range r.replicas {
		if rc.online.Load() && now-rc.ackTime.Load() <= int64(maxLag) {
			n++
		}
	}
	r.mu.Unlock()
	return n
}

// lagSeconds is Redis's lag field: whole seconds since the last ack.
func lagSeconds(now time.Time, ackNS int64) int64 {
	return int64(now.Sub(time.Unix(0, ackNS)) / time.Second)
}

// InfoOptions are the settings INFO replication shows besides the state.
type InfoOptions struct {
	Priority           int
	ReadOnly           bool
	MinReplicasToWrite int
	MinReplicasMaxLag  time.Duration
}

// Info returns the lines of INFO's replication section, as Redis 7.0.15
// prints them (Sentinel parses them by prefix, in order).
func (r *Replication) Info(o InfoOptions) []string {
	now := r.clock()
	r.mu.Lock()
	l := r.link
	reps := slices.Clone(r.replicas)
	r.mu.Unlock()
	r.blMu.Lock()
	replID, replID2, second := r.replID, r.replID2, r.secondOffset
	off, active, first, hist := r.bl.end, r.blActive, r.bl.start+1, r.bl.end-r.bl.start
	r.blMu.Unlock()
	var lines []string
	if l == nil {
		lines = append(lines, "role:master")
	} else {
		st := l.state.Load()
		status := "down"
		if st == stateConnected {
			status = "up"
		}
		lastIO := int64(-1)
		if t := l.lastIO.Load(); t != 0 && st >= stateSync {
			lastIO = int64(now.Sub(time.Unix(0, t)) / time.Second)
		}
		syncing := 0
		if st == stateSync {
			syncing = 1
		}
		lines = append(lines, "role:slave",
			"master_host:"+l.host,
			fmt.Sprintf("master_port:%d", l.port),
			"master_link_status:"+status,
			fmt.Sprintf("master_last_io_seconds_ago:%d", lastIO),
			fmt.Sprintf("master_sync_in_progress:%d", syncing),
			fmt.Sprintf("slave_read_repl_offset:%d", off),
			fmt.Sprintf("slave_repl_offset:%d", off))
		if st != stateConnected {
			down := int64(-1)
			if d := l.downSince.Load(); d != 0 {
				down = int64(now.Sub(time.Unix(0, d)) / time.Second)
			}
			lines = append(lines, fmt.Sprintf("master_link_down_since_seconds:%d", down))
		}
		lines = append(lines,
			fmt.Sprintf("slave_priority:%d", o.Priority),
			fmt.Sprintf("slave_read_only:%d", b2i(o.ReadOnly)),
			"replica_announced:1")
	}
	lines = append(lines, fmt.Sprintf("connected_slaves:%d", len(reps)))
	if o.MinReplicasToWrite > 0 && o.MinReplicasMaxLag > 0 {
		lines = append(lines, fmt.Sprintf("min_slaves_good_slaves:%d", r.GoodReplicas(o.MinReplicasMaxLag)))
	}
	for i, rc := range reps {
		state := "wait_bgsave"
		if rc.online.Load() {
			state = "online"
		} else if rc.sending.Load() {
			state = "send_bulk"
		}
		lines = append(lines, fmt.Sprintf("slave%d:ip=%s,port=%d,state=%s,offset=%d,lag=%d",
			i, rc.ip, rc.port, state, rc.ack.Load(), lagSeconds(now, rc.ackTime.Load())))
	}
	if !active {
		first, hist = 0, 0
	}
	lines = append(lines,
		"master_failover_state:no-failover",
		"master_replid:"+replID,
		"master_replid2:"+replID2,
		fmt.Sprintf("master_repl_offset:%d", off),
		fmt.Sprintf("second_repl_offset:%d", second),
		fmt.Sprintf("repl_backlog_active:%d", b2i(active)),
		fmt.Sprintf("repl_backlog_size:%d", r.size),
		fmt.Sprintf("repl_backlog_first_byte_offset:%d", first),
		fmt.Sprintf("repl_backlog_histlen:%d", hist))
	// Acknowledged replication (sync.go), after Redis's fields.
	sy := r.SyncStats()
	lines = append(lines,
		fmt.Sprintf("sync_replicas:%d", sy.Replicas),
		fmt.Sprintf("sync_replicas_timeout:%d", sy.Timeout.Milliseconds()),
		fmt.Sprintf("sync_acked_offset:%d", sy.AckedOffset),
		fmt.Sprintf("sync_fenced:%d", b2i(sy.Fenced)),
		fmt.Sprintf("sync_held:%d", sy.Held),
		fmt.Sprintf("sync_refused:%d", sy.Refused),
		fmt.Sprintf("sync_fences:%d", sy.Fences))
	return lines
}

// BacklogMemory returns the bytes the backlog holds allocated.
func (r *Replication) BacklogMemory() int64 {
	r.blMu.Lock()
	defer r.blMu.Unlock()
	return int64(len(r.bl.buf))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// RoleReplica is ROLE's view of an online replica.
type RoleReplica struct {
	IP   string
	Port int
	Ack  int64
}

// Role is what ROLE replies.
type Role struct {
	Replica bool
	// Primary: the offset and the online replicas.
	Offset   int64
	Replicas []RoleReplica
	// Replica: the primary's address, the link state (none, handshake,
	// connect, connecting, sync, connected) and the offset (-1 without a
	// link).
	Host  string
	Port  int
	State string
}

// Role returns ROLE's data.
func (r *Replication) Role() Role {
	r.mu.Lock()
	l := r.link
	reps := slices.Clone(r.replicas)
	r.mu.Unlock()
	ro := Role{Offset: r.Offset()}
	if l == nil {
		for _, rc := range reps {
			if rc.online.Load() {
				ro.Replicas = append(ro.Replicas, RoleReplica{IP: rc.ip, Port: rc.port, Ack: rc.ack.Load()})
			}
		}
		return ro
	}
	ro.Replica, ro.Host, ro.Port = true, l.host, l.port
	st := l.state.Load()
	ro.State = stateNames[st]
	if st < stateSync {
		ro.Offset = -1
	}
	return ro
}
