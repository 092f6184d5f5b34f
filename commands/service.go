package commands

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/replication"
	"github.com/cellserver/cellserver/resp"
)

// Setting is one name/value pair shown by CONFIG GET.
type Setting struct {
	Name  string
	Value string
}

// Defaults for the zero fields of [Config] (the MULTI queue's are
// DefaultMultiMaxCommands and DefaultMultiMaxBytes, the tracking table's
// DefaultTrackingTableMaxKeys).
const (
	DefaultVersion            = "dev"
	DefaultSweepInterval      = 100 * time.Millisecond
	DefaultSlowlogSlowerThan  = 10 * time.Millisecond
	DefaultSlowlogMaxLen      = 128
	DefaultKeyPrefixSeparator = ':'
	DefaultTopPrefixes        = 10
	DefaultTopPrefixInterval  = time.Minute
	DefaultMinReplicasMaxLag  = 10 * time.Second
)

// DefaultRedisVersion is the Redis version cellserver follows, error texts
// included, and reports by default (docs/commands.md, "Which Redis version
// cellserver reports").
const DefaultRedisVersion = "7.0.15"

// Config configures a Service. The zero value is valid except for Keyspace,
// which New creates when nil.
type Config struct {
	// Keyspace is the store commands operate on. If nil, New creates one
	// with keyspace defaults, and sets its journal to Service.Journal then
	// Replication's. A keyspace given here is its owner's to wire: WATCH,
	// tracking and replicas see its changes only through the journal chain
	// the owner sets (server.New).
	Keyspace *keyspace.Keyspace
	// Clock returns the wall-clock time. It is read once per command.
	// The default value is time.Now; tests inject their own.
	Clock func() time.Time
	// Settings are what CONFIG GET shows (the effective configuration).
	Settings []Setting
	// Version is cellserver's version, reported by INFO and HELLO.
	// The default value is DefaultVersion ("dev").
	Version string
	// RedisVersion is the Redis version reported by INFO (redis_version)
	// and HELLO (version), which clients gate features on. Commands
	// behave as Redis 7.0.15's whatever it says. The default value is
	// DefaultRedisVersion ("7.0.15").
	RedisVersion string
	// Password, when not empty, is required by AUTH before other commands.
	Password string
	// ACLFile is the aclfile (Redis's format: "user name rules..."
	// lines) loaded at start and by ACL LOAD, written by ACL SAVE; ""
	// (the default) for none.
	ACLFile string
	// Users are ACL users from the configuration file's "user" lines,
	// each "name rules..." (split on spaces). Not allowed with ACLFile.
	Users []string
	// ACLLogMaxLen bounds the ACL LOG (acllog-max-len). The default
	// value is 128.
	ACLLogMaxLen int
	// SweepInterval is the period of the active-expiry sweep.
	// The default value is DefaultSweepInterval (100ms, Redis's hz 10).
	SweepInterval time.Duration
	// Logger receives the server's log lines. The default is slog.Default().
	Logger *slog.Logger
	// ProtectedMode refuses clients that connect from a non-loopback
	// address (Redis's protected mode). The server package turns it on
	// when no password is set, unless told otherwise.
	ProtectedMode bool
	// Loopback classifies a client's remote address for protected mode;
	// nil means the real check. Tests inject their own.
	Loopback func(remoteAddr string) bool
	// Durability, when set (persistence with fsync "always"), holds each
	// client's replies until the changes its write commands made are
	// durable: Seq numbers the changes queued so far and WaitDurable
	// blocks until a number of them is on disk.
	Durability Durability
	// PersistenceInfo returns the lines of INFO's persistence section;
	// nil means persistence is off.
	PersistenceInfo func() []string
	// WriteError, when set, reports why the persistence store refuses
	// writes (nil while it accepts them). Meanwhile commands flagged Write
	// (and EXEC of a transaction holding one) are refused with MISCONF, as
	// Redis does when it cannot write its AOF; reads go on.
	WriteError func() error
	// AdmitWrite, when set, is called instead of WriteError before a
	// write command runs: it may block until the persistence queue is
	// back under its cap (backpressure; the caller's event loop stops
	// meanwhile), then returns what WriteError would.
	AdmitWrite func() error
	// SlowlogSlowerThan is the execution time from which a command is
	// kept in the SLOWLOG; negative turns the log off, 1ns keeps every
	// command. The default value (zero) is DefaultSlowlogSlowerThan
	// (10ms, Redis's 10000 µs).
	SlowlogSlowerThan time.Duration
	// SlowlogMaxLen is how many entries SLOWLOG keeps. The default value
	// is DefaultSlowlogMaxLen (128).
	SlowlogMaxLen int
	// KeyPrefixSeparator ends a key's prefix for the most-limited-prefixes
	// statistics. The default value is DefaultKeyPrefixSeparator (':').
	KeyPrefixSeparator byte
	// TopPrefixes is how many most-limited prefixes are reported, over
	// intervals of TopPrefixInterval. The defaults are DefaultTopPrefixes
	// (10) and DefaultTopPrefixInterval (1 minute).
	TopPrefixes       int
	TopPrefixInterval time.Duration
	// MultiMaxCommands and MultiMaxBytes cap what one client queues
	// between MULTI and EXEC: commands, and bytes (see queuedSize). The
	// command past either gets an error and EXEC aborts. The defaults are
	// DefaultMultiMaxCommands and DefaultMultiMaxBytes.
	MultiMaxCommands int
	MultiMaxBytes    int64
	// MaxStringLen is the longest string APPEND may build, in bytes
	// (Redis's proto-max-bulk-len). The default value is
	// resp.DefaultMaxBulkLen (16 MiB); the server passes its MaxBulkLen.
	MaxStringLen int64
	// TrackingTableMaxKeys bounds the keys the client-side caching table
	// remembers (Redis's tracking-table-max-keys); 0 means
	// DefaultTrackingTableMaxKeys, negative means no bound.
	TrackingTableMaxKeys int64
	// ConfigFile is the configuration file the settings were read from,
	// if any (INFO server config_file).
	ConfigFile string

	// Replication is the node's replication state. If nil, New creates
	// one with replication's defaults (a primary).
	Replication *replication.Replication
	// ReplicaPriority is Sentinel's replica-priority, shown in INFO as
	// slave_priority. The default value (zero) is 100
	// (replication.DefaultPriority); a negative value is shown as 0,
	// which tells Sentinel never to promote this node.
	ReplicaPriority int
	// ReplicaWritable lets a replica take writes of its own, which are
	// not passed on (replica-read-only no). By default a replica refuses
	// writes with READONLY.
	ReplicaWritable bool
	// ReplicaNoStaleData refuses, with MASTERDOWN, every command without
	// the stale flag while a replica has no link to its primary
	// (replica-serve-stale-data no). By default a replica serves its data.
	ReplicaNoStaleData bool
	// MinReplicasToWrite refuses writes on a primary with NOREPLICAS
	// unless that many replicas acknowledged within MinReplicasMaxLag
	// (min-replicas-to-write, min-replicas-max-lag). The defaults are 0
	// (off) and DefaultMinReplicasMaxLag (10s).
	MinReplicasToWrite int
	MinReplicasMaxLag  time.Duration
	// KillReplicationLinks closes the replication links of one kind and
	// returns how many it closed: kind "master" is this replica's link to
	// its primary, "replica" the links of the replicas fed by this
	// server. CLIENT KILL TYPE master|replica|slave calls it, since those
	// links have left the resp server's clients. nil means Replication's
	// (replication.Replication.KillLinks).
	KillReplicationLinks func(kind string) int
	// ConfigRewrite, when set, is CONFIG REWRITE: it writes the settings
	// that can change at run time (replicaof) to the configuration file
	// the server was started from. nil means the server runs without a
	// config file, and CONFIG REWRITE answers Redis's error for that.
	ConfigRewrite func() error
	// Cluster, when set, turns cluster mode on: every command with keys
	// is checked against the slot owners of its topology (MOVED,
	// CROSSSLOT, CLUSTERDOWN), CLUSTER answers, and only database 0 is
	// served. nil (the default) is a standalone server.
	Cluster *cluster.State
	// ClusterSlots counts, lists and deletes one slot's keys (CLUSTER
	// COUNTKEYSINSLOT, GETKEYSINSLOT); nil means cluster.KeyspaceStore
	// over Keyspace (a full scan per call without its slot index).
	ClusterSlots cluster.SlotStore
	// PubSubBus, with Cluster, forwards PUBLISH to the other nodes of the
	// topology and SPUBLISH to the other nodes of this node's shard
	// (cluster.Bus); nil keeps messages on this node.
	PubSubBus PubSubBus
	// DumpValue encodes a value for DUMP (server wires the persistence
	// codec, persistence.EncodeValue): appended to dst. Nil makes DUMP
	// answer that it is unavailable.
	DumpValue func(dst []byte, v keyspace.Value) []byte
	// Policies are the policies CL.APPLY applies (package policy); nil
	// means none. PolicyFile is the file they were read from, which
	// CL.POLICY RELOAD and ReloadPolicies read again; "" makes a reload
	// fail.
	Policies   *policy.Set
	PolicyFile string
	// RLSInfo returns the lines of INFO's rls section (the Envoy rate
	// limit service's counts); nil means the section is empty.
	RLSInfo func() []string
	// Saver writes a checkpoint on demand (SAVE, BGSAVE) and tells when
	// the last one succeeded (LASTSAVE); nil means persistence is off.
	Saver Saver
	// Shutdown runs the server's clean shutdown for SHUTDOWN (the path
	// SIGTERM takes, cmd_shutdown.go): it returns an error, and the server
	// keeps running, when it could not; on success the process is
	// stopping. nil makes SHUTDOWN fail. AbortShutdown cancels a shutdown
	// still waiting for its replicas (SHUTDOWN ABORT) and reports whether
	// one was.
	Shutdown      func(ShutdownOptions) error
	AbortShutdown func() bool
	// AOF is the persistence write path WAITAOF counts local syncs on; nil
	// without persistence (WAITAOF numlocal > 0 is refused then).
	AOF AOFSyncer
}

// Durability is what the persistence write path offers for group commit.
type Durability interface {
	Seq() uint64
	WaitDurable(seq uint64) error
	// Durable reports whether WaitDurable(seq) would return at once.
	Durable(seq uint64) bool
	// OnDurable registers fn, called whenever Durable may have become
	// true for more changes (set before serving).
	OnDurable(fn func())
}

// Network is what the connection layer tells the commands about itself
// (CLIENT LIST, INFO clients and stats). *resp.Server implements it.
type Network interface {
	Stats() resp.Stats
	Range(fn func(c *resp.Conn) bool)
}

// Service executes commands against a keyspace. It implements resp.Handler
// and is safe for concurrent use: each connection's commands run one at a
// time on the goroutine serving it (its event loop, or its own goroutine),
// and keyspace access goes through shard locks.
type Service struct {
	ks       *keyspace.Keyspace
	clock    func() time.Time
	version  string
	settings []Setting
	sweepInt time.Duration
	log      *slog.Logger
	started  time.Time
	monoBase time.Time // a fixed instant with a monotonic reading, for latencies
	// realClock: clock is time.Now, so a client may derive the wall
	// clock from the monotonic one (client.wallNS).
	realClock bool
	// redisVersion is Config.RedisVersion: INFO's redis_version, HELLO's version.
	redisVersion string

	table map[string]*Spec // lower-case name -> spec
	specs []*Spec          // every spec, subcommands included, by id

	net atomic.Pointer[netHolder]
	// maxStringLen is Config.MaxStringLen (APPEND's limit).
	maxStringLen int64
	// maxClients is the maxclients setting (0: unknown), which Refuse
	// applies to clients and replica links together.
	maxClients int

	// INFO and CONFIG: run_id and master_replid (random per process),
	// the configuration file and CONFIG REWRITE (nil without a config
	// file), INFO rls's source.
	runID, replID string
	configFile    string
	rewrite       func() error
	rlsInfo       func() []string

	auth    authConfig   // AUTH, HELLO, protected mode (cmd_connection.go)
	acl     aclTable     // users and the ACL log (acl.go)
	aclTop  []*Spec      // the top-level specs in table order (acl.go)
	persist persistHooks // the persistence write path's hooks
	stats   serviceStats // INFO's counters (stats.go, info.go)

	prefixes *prefixTracker // most-limited key prefixes (stats.go)
	slowlog  slowlog        // cmd_slowlog.go
	multi    multiLimits    // MULTI's queue limits (cmd_transactions.go)
	watch    *watchTable    // WATCHed keys (cmd_transactions.go)
	track    *trackTable    // client-side caching (cmd_tracking.go)
	pubsub   *pubsubTable   // cmd_pubsub.go
	repl     replRole       // the node's replication and its settings (cmd_replication.go)
	cluster  clusterMode    // cmd_cluster.go

	leases   leaseWaits   // CL.ACQUIRE ... WAIT's queues (cl_leases.go)
	kwait    keyWaits     // clients blocked on keys: XREAD BLOCK (stream_block.go)
	blocked  atomic.Int64 // clients blocked in WAIT or CL.ACQUIRE ... WAIT (blocked.go)
	pol      policyState  // CL.APPLY's policies (cl_policy.go)
	life     lifecycle    // SAVE, BGSAVE, SHUTDOWN (cmd_shutdown.go)
	monitors monitorTable // MONITOR (cmd_monitor.go)
	aof      AOFSyncer    // WAITAOF's local syncs (cmd_replication.go); nil without persistence
}

// persistHooks are what the persistence write path lends the commands
// (Config.Durability, PersistenceInfo, DumpValue, WriteError,
// AdmitWrite); each nil without persistence.
type persistHooks struct {
	durability Durability
	info       func() []string // INFO persistence (info.go)
	dumpValue  func(dst []byte, v keyspace.Value) []byte
	writeErr   func() error
	admitWrite func() error // WriteError, or AdmitWrite when set (dispatch.go)
}

type netHolder struct{ Network }

// New returns a Service for cfg.
func New(cfg Config) (*Service, error) {
	if err := auditModeErr(cfg.Cluster != nil, cfg.Policies); err != nil {
		return nil, err
	}
	ownKeyspace := cfg.Keyspace == nil
	if ownKeyspace {
		ks, err := keyspace.New(keyspace.Config{})
		if err != nil {
			return nil, err
		}
		cfg.Keyspace = ks
	}
	realClock := cfg.Clock == nil
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.Version = cmp.Or(cfg.Version, DefaultVersion)
	cfg.RedisVersion = cmp.Or(cfg.RedisVersion, DefaultRedisVersion)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, DefaultSweepInterval)
	if cfg.SweepInterval < 0 {
		return nil, errors.New("commands: sweep interval must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Loopback == nil {
		cfg.Loopback = isLoopback
	}
	cfg.SlowlogSlowerThan = cmp.Or(cfg.SlowlogSlowerThan, DefaultSlowlogSlowerThan)
	cfg.SlowlogMaxLen = cmp.Or(cfg.SlowlogMaxLen, DefaultSlowlogMaxLen)
	cfg.KeyPrefixSeparator = cmp.Or(cfg.KeyPrefixSeparator, DefaultKeyPrefixSeparator)
	cfg.TopPrefixes = cmp.Or(cfg.TopPrefixes, DefaultTopPrefixes)
	cfg.TopPrefixInterval = cmp.Or(cfg.TopPrefixInterval, DefaultTopPrefixInterval)
	cfg.MultiMaxCommands = cmp.Or(cfg.MultiMaxCommands, DefaultMultiMaxCommands)
	cfg.MultiMaxBytes = cmp.Or(cfg.MultiMaxBytes, DefaultMultiMaxBytes)
	cfg.TrackingTableMaxKeys = cmp.Or(cfg.TrackingTableMaxKeys, DefaultTrackingTableMaxKeys)
	cfg.ReplicaPriority = cmp.Or(cfg.ReplicaPriority, replication.DefaultPriority)
	cfg.MinReplicasMaxLag = cmp.Or(cfg.MinReplicasMaxLag, DefaultMinReplicasMaxLag)
	if cfg.MinReplicasToWrite < 0 || cfg.MinReplicasMaxLag < 0 {
		return nil, errors.New("commands: min-replicas settings must not be negative")
	}
	if cfg.MultiMaxCommands < 0 || cfg.MultiMaxBytes < 0 {
		return nil, errors.New("commands: MULTI queue limits must not be negative")
	}
	s := &Service{
		monoBase: time.Now(),
		persist: persistHooks{
			durability: cfg.Durability,
			info:       cfg.PersistenceInfo,
			dumpValue:  cfg.DumpValue,
			writeErr:   cfg.WriteError,
			admitWrite: cfg.AdmitWrite,
		},
		aof:          cfg.AOF,
		life:         lifecycle{saver: cfg.Saver, shutdown: cfg.Shutdown, abort: cfg.AbortShutdown},
		auth:         authConfig{password: cfg.Password, protected: cfg.ProtectedMode, loopback: cfg.Loopback},
		ks:           cfg.Keyspace,
		clock:        cfg.Clock,
		realClock:    realClock,
		version:      cfg.Version,
		settings:     cfg.Settings,
		sweepInt:     cfg.SweepInterval,
		log:          cfg.Logger,
		started:      cfg.Clock(),
		stats:        serviceStats{errors: make(map[string]int64)},
		multi:        multiLimits{maxCommands: cfg.MultiMaxCommands, maxBytes: cfg.MultiMaxBytes},
		maxStringLen: cmp.Or(cfg.MaxStringLen, resp.DefaultMaxBulkLen),
		replID:       newRunID(),
		configFile:   absPath(cfg.ConfigFile),

		repl: replRole{
			priority:    max(cfg.ReplicaPriority, 0),
			writable:    cfg.ReplicaWritable,
			noStale:     cfg.ReplicaNoStaleData,
			minReplicas: cfg.MinReplicasToWrite,
			minLag:      cfg.MinReplicasMaxLag,
			killLinks:   cfg.KillReplicationLinks,
		},
		pubsub:  newPubsubTable(),
		rewrite: cfg.ConfigRewrite,
		cluster: clusterMode{state: cfg.Cluster, slots: cfg.ClusterSlots},
	}
	s.redisVersion = cfg.RedisVersion
	if cfg.Cluster != nil {
		s.cluster.bus = cfg.PubSubBus
		// A node that stops serving a slot unsubscribes the subscribers
		// of its shard channels (Redis 7): they resubscribe where the
		// slot went.
		cfg.Cluster.OnChange(func(v *cluster.View) {
			s.pubsub.dropSlots(func(slot uint16) bool { return !v.Owns(slot) })
		})
	}
	if s.cluster.slots == nil {
		s.cluster.slots = cluster.KeyspaceStore{Keyspace: cfg.Keyspace}
	}
	if s.persist.admitWrite == nil {
		s.persist.admitWrite = cfg.WriteError
	}
	if !slices.ContainsFunc(s.settings, func(st Setting) bool { return st.Name == "tracking-table-max-keys" }) {
		s.settings = append(slices.Clip(s.settings), Setting{Name: "tracking-table-max-keys",
			Value: strconv.FormatInt(max(cfg.TrackingTableMaxKeys, 0), 10)})
	}
	for _, st := range trackingSettings {
		if !slices.ContainsFunc(s.settings, func(have Setting) bool { return have.Name == st.Name }) {
			s.settings = append(slices.Clip(s.settings), st)
		}
	}
	s.stats.inst.startupMemory = heapObjects()
	s.notePeak(s.stats.inst.startupMemory)
	s.slowlog = slowlog{slowerThan: cfg.SlowlogSlowerThan, maxLen: cfg.SlowlogMaxLen}
	s.prefixes = newPrefixTracker(cfg.KeyPrefixSeparator, cfg.TopPrefixes, cfg.TopPrefixInterval, cfg.Clock, statShards())
	s.stats.cmdsTotal = counter{newShards(statShards()), 0}
	s.buildTable(commandSpecs())
	s.initACL(cfg.Password, cfg.ACLFile, cmp.Or(cfg.ACLLogMaxLen, DefaultACLLogMaxLen))
	if err := s.loadUsers(cfg.Users); err != nil {
		return nil, err
	}
	s.installWatch(cfg.TrackingTableMaxKeys)
	s.maxClients, _ = strconv.Atoi(s.setting("maxclients"))
	s.repl.Replication = cfg.Replication
	if s.repl.Replication == nil {
		r, err := replication.New(replication.Config{Keyspace: cfg.Keyspace, Logger: cfg.Logger, Clock: cfg.Clock})
		if err != nil {
			return nil, err
		}
		s.repl.Replication = r
	}
	if ownKeyspace {
		cfg.Keyspace.SetJournal(keyspace.Chain(s.Journal(), s.repl.Journal()))
	}
	s.runID = s.repl.NodeID() // the identity replicas exchange (REPLCONF node-id)
	if s.repl.killLinks == nil {
		s.repl.killLinks = s.repl.KillLinks
	}
	s.cluster.on = s.cluster.state != nil
	s.pol.file = cfg.PolicyFile
	s.rlsInfo = cfg.RLSInfo
	s.pol.rand = rand.Uint64
	if cfg.Policies != nil {
		s.pol.set.Store(cfg.Policies)
		s.pol.loadedAt.Store(cfg.Clock().Unix())
		s.log.Info("policies loaded", "file", cfg.PolicyFile, "policies", cfg.Policies.Len())
	}
	return s, nil
}

func (s *Service) buildTable(rows []*Spec) {
	s.table = make(map[string]*Spec, len(rows))
	add := func(sp *Spec) {
		sp.id = len(s.specs)
		sp.stats = newCmdStats(statShards())
		aclPrepare(sp)
		s.specs = append(s.specs, sp)
	}
	for _, sp := range rows {
		if _, dup := s.table[sp.Name]; dup {
			panic("commands: duplicate command " + sp.Name)
		}
		s.table[sp.Name] = sp
		add(sp)
		if len(sp.Subs) > 0 {
			sp.subs = make(map[string]*Spec, len(sp.Subs))
			for _, sub := range sp.Subs {
				short := sub.Name[len(sp.Name)+1:]
				if _, dup := sp.subs[short]; dup {
					panic("commands: duplicate subcommand " + sub.Name)
				}
				sp.subs[short] = sub
				add(sub)
			}
		}
	}
}

// SetNetwork tells the server about its connection layer. Until it is
// called, CLIENT LIST shows no clients and INFO shows zero connections.
func (s *Service) SetNetwork(n Network) { s.net.Store(&netHolder{n}) }

// Keyspace returns the store the server operates on.
func (s *Service) Keyspace() *keyspace.Keyspace { return s.ks }

// Run performs background work (active expiry) until ctx is done.
func (s *Service) Run(ctx context.Context) {
	replDone := make(chan struct{})
	go func() {
		defer close(replDone)
		s.repl.Run(ctx.Done())
	}()
	defer func() { <-replDone }()
	t := time.NewTicker(s.sweepInt)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.SweepOnce()
			s.sample()
		}
	}
}

// SweepOnce runs one bounded active-expiry pass and returns the number of
// keys it removed.
func (s *Service) SweepOnce() int {
	start := time.Now()
	n := s.ks.Sweep(unixMilli(s.clock()), keyspace.SweepConfig{PerShard: 10, Rounds: 4})
	s.stats.expireNS.Add(int64(time.Since(start)))
	s.stats.expired.Add(int64(n))
	return n
}

// lookedUp counts a read command's key lookup for INFO's keyspace_hits and
// keyspace_misses (Redis counts them in lookupKeyRead: GET, EXISTS, TYPE,
// TTL and the like; writes such as CL.THROTTLE count neither, as a module
// that opens its key for writing counts neither in Redis).
func (s *Service) lookedUp(found bool) {
	if found {
		s.stats.keyspaceHits.Add(1)
	} else {
		s.stats.keyspaceMisses.Add(1)
	}
}

// Open implements resp.Handler.
func (s *Service) Open(c *resp.Conn) {
	cl := &client{conn: c}
	// Before the first read, so the connection's limits for clients that
	// have not authenticated apply from the first byte.
	cl.user.Store(s.acl.def)
	cl.setAuthed(!s.authRequired())
	cl.multi.seen.Store(-1) // not in MULTI
	cl.x.s = s
	cl.x.c = c
	cl.x.cl = cl
	// The statistics' shard: the connection's event loop, or for a
	// connection on a goroutine of its own, the shards in turn.
	shard := c.Loop()
	if shard < 0 {
		shard = int(s.stats.openSeq.Add(1) - 1)
	}
	cl.shard = uint16(shard % statShards())
	c.SetContext(cl)
	// Protected mode is enforced as clients are accepted (Refuse, set as
	// resp.Config.Refuse). Should a connection layer without that hook
	// serve a remote client, its first command gets the DENIED error,
	// then the connection closes.
	cl.denied = s.protectedNow() && !s.auth.loopback(c.RemoteAddr())
}

// Refuse is resp.Config.Refuse for this server: with protected mode on, a
// client from a non-loopback address receives the DENIED error and is
// closed as it is accepted, before it counts towards maxclients (Redis
// refuses it in its accept handler too), so idle remote connections cannot
// take the slots of local clients. The replicas' links, which have left
// the connection layer, count towards maxclients here: a client past it
// gets Redis's error. It returns nil for a client to serve.
func (s *Service) Refuse(remote net.Addr) []byte {
	if links := s.repl.Links(); links > 0 && s.maxClients > 0 {
		if h := s.net.Load(); h != nil && int(h.Stats().ConnectedClients)+links >= s.maxClients {
			return rawMaxClients
		}
	}
	if !s.protectedNow() {
		return nil
	}
	addr := ""
	if remote != nil {
		addr = remote.String()
	}
	if s.auth.loopback(addr) {
		return nil
	}
	return rawDenied
}

// protectedNow reports whether protected mode applies: it is on and the
// default user needs no password (Redis 7.0: a password given to the
// default user by ACL SETUSER or the aclfile lifts it, as requirepass
// does).
func (s *Service) protectedNow() bool {
	return s.auth.protected && s.acl.def.state.Load().nopass
}

// rawDenied is msgDenied as the error reply Refuse sends.
var rawDenied = []byte("-" + msgDenied + "\r\n")

// rawMaxClients is msgMaxClients as the error reply Refuse sends.
var rawMaxClients = []byte("-" + msgMaxClients + "\r\n")

// BeforeWrite implements resp.BeforeWriter: with sync-replicas, the
// replies of the writes that changed keys wait for their replicas'
// acknowledgement, and leave as NOREPLICAS past sync-replicas-timeout
// (syncRelease); with fsync "always", replies wait until the changes of
// this client's write commands are durable; many clients wait on the same
// batch (group commit).
func (s *Service) BeforeWrite(c *resp.Conn) error {
	cl, _ := c.Context().(*client)
	if cl == nil {
		return nil
	}
	if cl.sync.off != 0 {
		s.syncRelease(c, cl)
	}
	if cl.pendingSeq == 0 || s.persist.durability == nil {
		return nil
	}
	seq := cl.pendingSeq
	cl.pendingSeq = 0
	return s.persist.durability.WaitDurable(seq)
}

// Ready implements resp.Deferrer: whether c's replies may leave without
// waiting in BeforeWrite.
func (s *Service) Ready(c *resp.Conn) bool {
	cl, _ := c.Context().(*client)
	if cl == nil {
		return true
	}
	if cl.sync.off != 0 && !s.syncReady(cl) {
		return false
	}
	if cl.pendingSeq == 0 || s.persist.durability == nil {
		return true
	}
	return s.persist.durability.Durable(cl.pendingSeq)
}

// SetNotify implements resp.Deferrer.
func (s *Service) SetNotify(fn func()) {
	if s.persist.durability != nil {
		s.persist.durability.OnDurable(fn)
	}
	s.repl.OnSync(fn)
}

// isLoopback reports whether a "host:port" address is on the loopback
// interface (127.0.0.0/8 or ::1); unix sockets count as local.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr == "" || addr == "@"
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close implements resp.Handler: it forgets the client's watched keys
// and subscriptions, and turns its tracking off.
func (s *Service) Close(c *resp.Conn) {
	if cl, _ := c.Context().(*client); cl != nil {
		cl.closed.Store(true)
		s.unwatchAll(cl)
		s.track.disable(cl)
		s.pubsub.drop(cl)
		s.dropLeaseWaiters(cl)
		s.dropBlocked(cl)
		s.dropMonitor(cl)
		if cl.migSource != "" && s.cluster.state != nil {
			s.cluster.state.MigrateClosed(cl.migSource, c.ID())
		}
	}
}

func unixMilli(t time.Time) int64 { return t.UnixMilli() }
