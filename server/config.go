package server

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/replication"
	"github.com/cellserver/cellserver/resp"
)

// Config is cellserver's whole configuration. Zero values mean the
// documented defaults; Validate reports every problem at once.
type Config struct {
	// Addr is the TCP address to listen on. The default value is
	// DefaultAddr, "127.0.0.1:6379": cellserver is reachable only from this machine
	// unless told otherwise.
	Addr string
	// Databases is the number of databases (SELECT 0..n-1). The default
	// value is keyspace.DefaultDatabases (16).
	Databases int
	// Shards is the number of lock shards per database, rounded up to a
	// power of two. The default value is keyspace.DefaultShards (256).
	Shards int
	// MaxClients caps concurrent connections; the next one gets
	// "ERR max number of clients reached". The default value is
	// resp.DefaultMaxClients (10000).
	MaxClients int
	// IdleTimeout closes a client silent for that long; 0 never does
	// (Redis's "timeout 0"). The default value is 0.
	IdleTimeout time.Duration
	// MaxBulkLen is the largest argument accepted, in bytes. The default
	// value is resp.DefaultMaxBulkLen (16 MiB).
	MaxBulkLen int64
	// MaxMultiBulkLen is the most arguments in one command. The default
	// value is resp.DefaultMaxMultiBulkLen (1048576).
	MaxMultiBulkLen int64
	// MaxQueryBuffer caps the unparsed bytes buffered for one client. The
	// default value is resp.DefaultMaxQueryBuffer (64 MiB).
	MaxQueryBuffer int64
	// MaxOutputBuffer disconnects a client whose replies to one batch of
	// commands exceed it, in bytes. The default value is
	// resp.DefaultMaxOutputBuffer (64 MiB).
	MaxOutputBuffer int64
	// OutputTimeout disconnects a client that does not read its replies for
	// this long. The default value is resp.DefaultOutputTimeout (30s).
	OutputTimeout time.Duration
	// MultiMaxCommands and MultiMaxBytes cap what one client queues
	// between MULTI and EXEC (commands; argument bytes plus 24 per
	// argument). The defaults are 10000 and 64 MiB
	// (commands.DefaultMultiMaxCommands, DefaultMultiMaxBytes).
	MultiMaxCommands int
	MultiMaxBytes    int64
	// EventLoops is the number of epoll event loops serving plain TCP
	// clients on Linux: 0 (the default) means one per GOMAXPROCS, -1 a
	// goroutine per connection instead (see resp.Config.EventLoops).
	EventLoops int
	// Password, when set, must be given with AUTH before other commands:
	// the default ACL user's password (requirepass).
	Password string
	// ACLFile is the ACL file (Redis's "user name rules..." lines), loaded
	// at start and by ACL LOAD, written by ACL SAVE; "" (the default): none.
	ACLFile string
	// Users are ACL users given in the configuration file ("user name
	// rules..." lines, without the "user" word); not allowed with ACLFile.
	Users []string
	// ACLLogMaxLen bounds the ACL LOG. The default value is 128.
	ACLLogMaxLen int
	// TLSCertFile and TLSKeyFile, when set, make the listener speak TLS
	// only. TLSCACertFile, when set, also requires every client to present
	// a certificate signed by one of its CAs.
	TLSCertFile   string
	TLSKeyFile    string
	TLSCACertFile string
	// TLSConfig, when set, makes the listener speak TLS only with this
	// configuration (cloned) instead of one built from the files, as
	// net/http's Server.TLSConfig: for embedders holding their
	// certificates in memory or rotating them with GetCertificate. It
	// excludes TLSCertFile, TLSKeyFile and TLSCACertFile. Its ClientCAs
	// then verify a primary (TLSReplication) and its first certificate,
	// unless TLSClientCertFile is set, is the one presented as a client.
	TLSConfig *tls.Config
	// TLSClientCertFile and TLSClientKeyFile are the certificate
	// cellserver presents as a TLS client (--healthcheck) to a server that
	// requires one; when empty, the server certificate is used, as Redis
	// does with tls-client-cert-file. Given together or not at all.
	TLSClientCertFile string
	TLSClientKeyFile  string
	// DisableProtectedMode lets clients from non-loopback addresses in
	// when no password is set. By default (false) such clients get
	// Redis's protected-mode error and are disconnected.
	DisableProtectedMode bool
	// LogFormat is "text" (the default) or "json"; LogLevel is "debug",
	// "info" (the default), "warn" or "error". When Logger is nil and
	// either is set, New logs to os.Stderr with NewLogger; when both are
	// empty it uses slog.Default(). They are ignored when Logger is set.
	LogFormat string
	LogLevel  string
	// ShutdownTimeout bounds how long Shutdown waits for in-flight commands
	// when Run's context ends. The default value is DefaultShutdownTimeout
	// (10s).
	ShutdownTimeout time.Duration
	// Clock is the wall clock; nil means time.Now. Tests inject their own.
	Clock func() time.Time
	// MaxMemory caps the estimated memory of the limiter state in bytes (0:
	// no cap, the default). MaxMemoryPolicy says what happens at the cap:
	// "allkeys-lru" (the default: evict the least recently used keys —
	// an evicted limiter key starts afresh, which for a rate limiter is
	// better than refusing service), "allkeys-lfu" (evict the least
	// frequently used keys, as Redis counts accesses; OBJECT FREQ and
	// redis-cli --hotkeys report the counts) or "noeviction" (refuse to
	// create keys with Redis's OOM error).
	MaxMemory       int64
	MaxMemoryPolicy string
	// DataDir, when set, keeps every key's state in the store OpenStore
	// opens in this directory (cmd/cellserver: a Pebble database): loaded
	// at startup, written behind every change. Empty (the default) keeps
	// everything in memory only.
	DataDir string
	// OpenStore opens the store for DataDir; it is required with DataDir
	// (Validate refuses a DataDir without it) and unused without.
	// cmd/cellserver sets changelog.Opener(pebblestore.OpenStore, ...). It is a field, not a
	// default, so that this package does not link Pebble: a program that
	// never sets it (an in-process test server) does not carry it.
	OpenStore persistence.Opener
	// Fsync is the durability policy with DataDir: "always" (a reply
	// leaves once its change is on disk; group commit), "everysec" (the
	// default: a crash loses at most about a second) or "no" (the OS
	// decides).
	Fsync string
	// LoadDamagedWAL starts from a data directory whose newest WAL is
	// damaged before its end, loading the changes before the damage and
	// dropping those after it (logged at WARN, counted in INFO
	// persistence). False, the default, refuses to start from it.
	LoadDamagedWAL bool
	// PersistMaxPending caps the bytes of changes queued for the store
	// and not yet written (persistence.Writer.SetMaxPending); past it,
	// write commands wait for the writer (backpressure). 0 means
	// persistence.DefaultMaxPending.
	PersistMaxPending int64
	// CheckpointBytes: with a store that keeps a change log
	// (changelog.Store, what cmd/cellserver opens), a checkpoint starts
	// once the log written since the previous one passes this many bytes;
	// 0 means changelog.DefaultCheckpointBytes. cmd/cellserver hands it to
	// the store's Opener; it is here for CONFIG GET and validation.
	CheckpointBytes int64
	// MetricsAddr, when set, serves Metrics's handler over HTTP on this
	// address (cmd/cellserver: Prometheus metrics at /metrics and the
	// probes /healthz and /readyz). Off by default.
	MetricsAddr string
	// Metrics builds the handler served on MetricsAddr from the running
	// server's parts; it is required with MetricsAddr (Validate refuses a
	// MetricsAddr without it) and unused without. cmd/cellserver sets
	// metrics.ServerHandler; like OpenStore it is a field so that this
	// package does not link the Prometheus client.
	Metrics func(MetricsSources) http.Handler
	// MetricsUser and MetricsPassword, when set (both or neither), make
	// the metrics listener ask for HTTP basic authentication on every
	// path but the probes /healthz and /readyz (metricsauth.go). They are
	// the listener's own credentials, not an ACL user's.
	MetricsUser, MetricsPassword string
	// MetricsACL makes the metrics listener accept, besides the pair
	// above, the server's ACL users that have a password and may run
	// INFO (commands.Service.CheckUser); with it, and no pair, only they
	// get in.
	MetricsACL bool
	// KeyPrefixSeparator ends the key prefix used by the most-limited
	// prefixes metric. The default value is ":"
	// (commands.DefaultKeyPrefixSeparator).
	KeyPrefixSeparator string
	// TopPrefixes is how many most-limited key prefixes the metrics report
	// (over one-minute intervals). The default value is
	// commands.DefaultTopPrefixes (10).
	TopPrefixes int
	// SlowlogSlowerThan and SlowlogMaxLen configure SLOWLOG: commands
	// slower than the first are kept, up to the second entries. Zero
	// values mean commands.DefaultSlowlogSlowerThan (10ms) and
	// DefaultSlowlogMaxLen (128); a negative duration turns SLOWLOG off.
	SlowlogSlowerThan time.Duration
	SlowlogMaxLen     int
	// Loopback, if set, replaces the check of a client's address for
	// protected mode (tests).
	Loopback func(remoteAddr string) bool
	// Logger receives log lines; nil means the one LogFormat and LogLevel
	// describe (see there), else slog.Default().
	Logger *slog.Logger
	// Version is reported by INFO and --version. The default value is
	// commands.DefaultVersion ("dev").
	Version string
	// RedisVersion is the Redis version INFO (redis_version) and HELLO
	// (version) report, "major.minor.patch"; clients gate features on it
	// (docs/commands.md, "Which Redis version cellserver reports").
	// Commands behave as Redis 7.0.15's whatever it says. The default
	// value is commands.DefaultRedisVersion ("7.0.15").
	RedisVersion string
	// ConfigFile is the file the configuration was read from, if any
	// (INFO server config_file).
	ConfigFile string

	// ReplicaOf, "host port", starts the node as a replica of that
	// primary (replicaof); empty starts a primary.
	ReplicaOf string
	// MasterUser and MasterAuth authenticate a replica to its primary.
	MasterUser, MasterAuth string
	// ReplBacklogSize is the replication backlog's size in bytes. The
	// default value is replication.DefaultBacklogSize (16 MiB).
	ReplBacklogSize int64
	// ReplicaPriority is Sentinel's replica-priority: the default value
	// (zero) is 100; a negative value means 0 (never promote).
	ReplicaPriority int
	// ReplicaAnnounceIP and ReplicaAnnouncePort are the address a replica
	// gives its primary (and Sentinel then uses) instead of its own.
	ReplicaAnnounceIP   string
	ReplicaAnnouncePort int
	// ReplicaWritable (replica-read-only no) lets a replica take local
	// writes, which are not passed on.
	ReplicaWritable bool
	// ReplicaNoStaleData (replica-serve-stale-data no) refuses most
	// commands with MASTERDOWN while a replica has no link.
	ReplicaNoStaleData bool
	// MinReplicasToWrite and MinReplicasMaxLag refuse writes on a primary
	// with fewer good replicas (min-replicas-to-write, min-replicas-max-lag).
	// The defaults are 0 (off) and commands.DefaultMinReplicasMaxLag
	// (10s).
	MinReplicasToWrite int
	MinReplicasMaxLag  time.Duration
	// SyncReplicas (sync-replicas) makes a primary hold the reply of every
	// command that changed a key until that many replicas acknowledged the
	// change; 0 (the default) replicates asynchronously. A reply not
	// acknowledged within SyncReplicasTimeout (sync-replicas-timeout,
	// default replication.DefaultSyncTimeout, 500ms) becomes NOREPLICAS,
	// and writes are refused at once until the replicas catch up. Both
	// change at run time with CONFIG SET.
	SyncReplicas        int
	SyncReplicasTimeout time.Duration
	// TLSReplication makes a replica connect to its primary over TLS
	// (tls-replication), verifying it with TLSCACertFile and presenting
	// TLSClientCertFile (else TLSCertFile).
	TLSReplication bool
	// ClusterEnabled turns cluster mode on (cluster-enabled yes): keys
	// are routed by hash slot over a topology installed with CELLCLUSTER
	// CONFIG or loaded from ClusterConfigFile, and only database 0 is
	// served. Until a topology is installed every command with keys gets
	// CLUSTERDOWN, as a fresh Redis Cluster node answers.
	ClusterEnabled bool
	// ClusterConfigFile, with ClusterEnabled, is loaded at start (if it
	// exists) and rewritten atomically with every topology installed; the
	// node's id is kept next to it, in ClusterConfigFile+".myid".
	ClusterConfigFile string
	// ClusterNodeID is this node's id in the topology, 40 lower-case hex
	// digits as Redis's (cluster.ValidID); empty means the one kept next
	// to ClusterConfigFile, or a new random one.
	ClusterNodeID string
	// ClusterPubSubQueueLimit (cluster-pubsub-queue-limit) bounds, in
	// bytes, the queue of each pub/sub link to another node of the
	// cluster (cluster.Bus): a PUBLISH or SPUBLISH that would pass it is
	// not sent to that node (counted in INFO cluster). The default value
	// is cluster.DefaultBusQueueLimit (32 MiB).
	ClusterPubSubQueueLimit int64
	// ConfigRewrite, when set, is CONFIG REWRITE: it writes the settings
	// that can change at run time, with their current values ("" for
	// unset), to the config file. cmd/cellserver sets it when it runs from
	// --config; nil means there is no config file to rewrite.
	ConfigRewrite func(runtime []commands.Setting) error
	// Policies is the policy file (YAML, package policy) CL.APPLY's
	// policies are read from at start; New refuses an invalid file,
	// listing every problem. CL.POLICY RELOAD (and cmd/cellserver on
	// SIGHUP) reads it again. Empty (the default) means no policies.
	Policies string

	// RLSAddr, when set, serves Envoy's rate limit service
	// (envoy.service.ratelimit.v3.RateLimitService) over gRPC on this
	// address, configured by RLSConfig (a YAML file or a directory of
	// them in envoyproxy/ratelimit's format), over this server's keyspace.
	// Off by default. RLS builds it (cmd/cellserver: envoyrls.New); like
	// Metrics it is a field so that this package does not link gRPC.
	// RLSResponseHeaders adds the RateLimit-Limit/-Remaining/-Reset
	// response headers (envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED). See rls.go.
	RLSAddr            string
	RLSConfig          string
	RLSResponseHeaders bool
	RLS                func(RLSSources) (RLSServer, error)
}

// MetricsSources is what Config.Metrics reads from a Server, at scrape
// time: nothing is computed on the request path.
type MetricsSources struct {
	Commands    *commands.Service
	Network     *resp.Server
	Replication *replication.Replication
	// Writer and Store are nil without DataDir.
	Writer *persistence.Writer
	Store  persistence.Store
	// Clock is Config.Clock (nil: time.Now).
	Clock func() time.Time
	// Ready reports whether the server is serving and not shutting down
	// (for a readiness probe).
	Ready func() bool
	// RLS returns the Envoy front door's counts; false when it is off.
	RLS func() (RLSStats, bool)
	// Cluster is the node's cluster state, nil unless cluster mode.
	Cluster *cluster.State
	// Version is Config.Version.
	Version string
}

// Defaults for Config's zero values that this package owns. The others
// are those of the package that uses the field: resp (connection limits),
// keyspace (databases, shards), commands (MULTI, SLOWLOG, metrics
// prefixes, min-replicas-max-lag), persistence, changelog and replication.
const (
	DefaultAddr            = "127.0.0.1:6379"
	DefaultShutdownTimeout = 10 * time.Second
	DefaultMaxMemoryPolicy = "allkeys-lru"
	DefaultFsync           = "everysec"
	DefaultLogFormat       = "text"
	DefaultLogLevel        = "info"
	// The MULTI queue's caps (--multi-max-commands, --multi-max-bytes).
	DefaultMultiMaxCommands = commands.DefaultMultiMaxCommands
	DefaultMultiMaxBytes    = commands.DefaultMultiMaxBytes
)

// withDefaults returns c with zero values replaced by defaults: what New
// runs with, and what CONFIG GET shows.
func (c Config) withDefaults() Config {
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	c.Databases = cmp.Or(c.Databases, keyspace.DefaultDatabases)
	c.Shards = cmp.Or(c.Shards, keyspace.DefaultShards)
	c.MaxClients = cmp.Or(c.MaxClients, resp.DefaultMaxClients)
	c.MaxBulkLen = cmp.Or(c.MaxBulkLen, resp.DefaultMaxBulkLen)
	c.MaxMultiBulkLen = cmp.Or(c.MaxMultiBulkLen, resp.DefaultMaxMultiBulkLen)
	c.MaxQueryBuffer = cmp.Or(c.MaxQueryBuffer, resp.DefaultMaxQueryBuffer)
	c.MaxOutputBuffer = cmp.Or(c.MaxOutputBuffer, resp.DefaultMaxOutputBuffer)
	c.OutputTimeout = cmp.Or(c.OutputTimeout, resp.DefaultOutputTimeout)
	c.MultiMaxCommands = cmp.Or(c.MultiMaxCommands, commands.DefaultMultiMaxCommands)
	c.MultiMaxBytes = cmp.Or(c.MultiMaxBytes, commands.DefaultMultiMaxBytes)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.Version = cmp.Or(c.Version, commands.DefaultVersion)
	c.KeyPrefixSeparator = cmp.Or(c.KeyPrefixSeparator, string(rune(commands.DefaultKeyPrefixSeparator)))
	c.SlowlogMaxLen = cmp.Or(c.SlowlogMaxLen, commands.DefaultSlowlogMaxLen)
	c.SlowlogSlowerThan = cmp.Or(c.SlowlogSlowerThan, commands.DefaultSlowlogSlowerThan)
	c.TopPrefixes = cmp.Or(c.TopPrefixes, commands.DefaultTopPrefixes)
	c.LogFormat = cmp.Or(c.LogFormat, DefaultLogFormat)
	c.LogLevel = cmp.Or(c.LogLevel, DefaultLogLevel)
	c.MaxMemoryPolicy = cmp.Or(c.MaxMemoryPolicy, DefaultMaxMemoryPolicy)
	c.Fsync = cmp.Or(c.Fsync, DefaultFsync)
	c.CheckpointBytes = cmp.Or(c.CheckpointBytes, changelog.DefaultCheckpointBytes)
	c.PersistMaxPending = cmp.Or(c.PersistMaxPending, persistence.DefaultMaxPending)
	c.ReplBacklogSize = cmp.Or(c.ReplBacklogSize, replication.DefaultBacklogSize)
	c.ReplicaPriority = cmp.Or(c.ReplicaPriority, replication.DefaultPriority)
	c.MinReplicasMaxLag = cmp.Or(c.MinReplicasMaxLag, commands.DefaultMinReplicasMaxLag)
	c.SyncReplicasTimeout = cmp.Or(c.SyncReplicasTimeout, replication.DefaultSyncTimeout)
	c.ClusterPubSubQueueLimit = cmp.Or(c.ClusterPubSubQueueLimit, cluster.DefaultBusQueueLimit)
	return c
}

// parseReplicaOf splits "host port" (replicaof); ok is false for "".
func parseReplicaOf(v string) (host string, port int, ok bool, err error) {
	f := strings.Fields(v)
	if len(f) == 0 {
		return "", 0, false, nil
	}
	if len(f) == 2 && strings.EqualFold(f[0], "no") && strings.EqualFold(f[1], "one") {
		return "", 0, false, nil
	}
	if len(f) != 2 {
		return "", 0, false, errors.New(`must be "host port"`)
	}
	p, err := strconv.Atoi(f[1])
	if err != nil || p < 1 || p > 65535 {
		return "", 0, false, errors.New("port must be between 1 and 65535")
	}
	return f[0], p, true, nil
}

// Validate reports every problem with c (after defaults) as one error. It
// reads the TLS files, as New does.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate, also returning the TLS material it read, for New.
func (c Config) validate() (tlsMaterial, error) {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		bad("addr %q: %v", c.Addr, err)
	}
	if c.Databases < 1 || c.Databases > 1<<16 {
		bad("databases %d: must be between 1 and 65536", c.Databases)
	}
	if c.Shards < 1 || c.Shards > 1<<20 {
		bad("shards %d: must be between 1 and 1048576", c.Shards)
	}
	if err := c.respConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxMemory < 0 {
		bad("maxmemory %d: must not be negative", c.MaxMemory)
	}
	if _, err := parsePolicy(c.MaxMemoryPolicy); err != nil {
		bad("maxmemory-policy %q: must be allkeys-lru, allkeys-lfu or noeviction", c.MaxMemoryPolicy)
	}
	if c.CheckpointBytes < 0 {
		bad("checkpoint-bytes %d: must be positive", c.CheckpointBytes)
	}
	if c.PersistMaxPending < 0 {
		bad("persist-max-pending-bytes %d: must be positive", c.PersistMaxPending)
	}
	if _, err := persistence.ParseFsync(c.Fsync); err != nil {
		bad("fsync %q: must be always, everysec or no", c.Fsync)
	}
	if len(c.KeyPrefixSeparator) != 1 {
		bad("metrics-key-separator %q: must be one byte", c.KeyPrefixSeparator)
	}
	if c.RedisVersion != "" && !redisVersionRE.MatchString(c.RedisVersion) {
		bad("redis-version %q: must be major.minor.patch, such as 7.4.0", c.RedisVersion)
	}
	if c.SlowlogMaxLen < 0 {
		bad("slowlog-max-len %d: must not be negative", c.SlowlogMaxLen)
	}
	if c.MultiMaxCommands < 0 {
		bad("multi-max-commands %d: must not be negative", c.MultiMaxCommands)
	}
	if c.MultiMaxBytes < 0 {
		bad("multi-max-bytes %d: must not be negative", c.MultiMaxBytes)
	}
	if _, _, _, err := parseReplicaOf(c.ReplicaOf); err != nil {
		bad("replicaof %q: %v", c.ReplicaOf, err)
	}
	if c.ReplBacklogSize < 16<<10 || c.ReplBacklogSize > 1<<40 {
		bad("repl-backlog-size %d: must be between 16kb and 1tb", c.ReplBacklogSize)
	}
	if c.ReplicaAnnouncePort < 0 || c.ReplicaAnnouncePort > 65535 {
		bad("replica-announce-port %d: must be between 0 and 65535", c.ReplicaAnnouncePort)
	}
	if c.MinReplicasToWrite < 0 {
		bad("min-replicas-to-write %d: must not be negative", c.MinReplicasToWrite)
	}
	if c.MinReplicasMaxLag < 0 {
		bad("min-replicas-max-lag %v: must not be negative", c.MinReplicasMaxLag)
	}
	if c.SyncReplicas < 0 || c.SyncReplicas > commands.MaxSyncReplicas {
		bad("sync-replicas %d: must be between 0 and %d", c.SyncReplicas, commands.MaxSyncReplicas)
	}
	if c.SyncReplicasTimeout < time.Millisecond || c.SyncReplicasTimeout > time.Hour {
		bad("sync-replicas-timeout %v: must be between 1ms and 1h", c.SyncReplicasTimeout)
	}
	if c.TopPrefixes < 1 || c.TopPrefixes > 1000 {
		bad("metrics-top-prefixes %d: must be between 1 and 1000", c.TopPrefixes)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			bad("metrics-addr %q: %v", c.MetricsAddr, err)
		}
		if c.Metrics == nil {
			bad("metrics-addr %q: Config.Metrics is not set (e.g. metrics.ServerHandler)", c.MetricsAddr)
		}
	}
	if (c.MetricsUser == "") != (c.MetricsPassword == "") {
		bad("metrics-user and metrics-password: set both or neither")
	}
	if strings.Contains(c.MetricsUser, ":") {
		bad("metrics-user %q: must not contain ':' (HTTP basic authentication)", c.MetricsUser)
	}
	if c.DataDir != "" && c.OpenStore == nil {
		bad("data-dir %q: Config.OpenStore is not set (e.g. pebblestore.OpenStore)", c.DataDir)
	}
	tm, err := c.loadTLS()
	if err != nil {
		errs = append(errs, err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format %q: must be text or json", c.LogFormat)
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		bad("log-level %q: must be debug, info, warn or error", c.LogLevel)
	}
	if c.ShutdownTimeout < 0 {
		bad("shutdown-timeout %s: must not be negative", c.ShutdownTimeout)
	}
	if c.ClusterNodeID != "" {
		if why := cluster.ValidID(c.ClusterNodeID); why != "" {
			bad("cluster-node-id %q: %s", c.ClusterNodeID, why)
		}
	}
	if c.ClusterPubSubQueueLimit != 0 && (c.ClusterPubSubQueueLimit < 64<<10 || c.ClusterPubSubQueueLimit > 1<<40) {
		bad("cluster-pubsub-queue-limit %d: must be between 64kb and 1tb", c.ClusterPubSubQueueLimit)
	}
	if !c.ClusterEnabled && (c.ClusterConfigFile != "" || c.ClusterNodeID != "") {
		bad("cluster-config-file and cluster-node-id need cluster-enabled yes")
	}
	errs = append(errs, c.validateRLS()...)
	return tm, errors.Join(errs...)
}

// ParseLogLevel maps a log-level name to a slog.Level.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// logOutput is where New's logger writes when it builds one from
// LogFormat and LogLevel (tests replace it).
// redisVersionRE is the form of Config.RedisVersion: Redis's own.
var redisVersionRE = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$`)

var logOutput io.Writer = os.Stderr

// NewLogger builds the logger cfg asks for, writing to w.
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	cfg = cfg.withDefaults()
	level, _ := ParseLogLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// respConfig is the connection layer's part of c.
func (c Config) respConfig() resp.Config {
	return resp.Config{
		MaxClients:      c.MaxClients,
		IdleTimeout:     c.IdleTimeout,
		MaxBulkLen:      c.MaxBulkLen,
		MaxMultiBulkLen: c.MaxMultiBulkLen,
		MaxQueryBuffer:  c.MaxQueryBuffer,
		MaxOutputBuffer: c.MaxOutputBuffer,
		OutputTimeout:   c.OutputTimeout,
		EventLoops:      c.EventLoops,
		Logger:          c.Logger,
	}
}

// Settings returns the effective configuration as CONFIG GET shows it,
// with the password masked.
func (c Config) Settings() []commands.Setting {
	c = c.withDefaults()
	host, port, _ := net.SplitHostPort(c.Addr)
	pass := ""
	if c.Password != "" {
		pass = "********"
	}
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	return []commands.Setting{
		{Name: "bind", Value: host},
		{Name: "port", Value: port},
		{Name: "databases", Value: itoa(int64(c.Databases))},
		{Name: "shards", Value: itoa(int64(c.Shards))},
		{Name: "maxclients", Value: itoa(int64(c.MaxClients))},
		{Name: "timeout", Value: itoa(int64(c.IdleTimeout / time.Second))},
		{Name: "proto-max-bulk-len", Value: itoa(c.MaxBulkLen)},
		{Name: "proto-max-multibulk-len", Value: itoa(c.MaxMultiBulkLen)},
		{Name: "client-query-buffer-limit", Value: itoa(c.MaxQueryBuffer)},
		{Name: "client-output-buffer-limit", Value: itoa(max(c.MaxOutputBuffer, 0))},
		{Name: "client-output-timeout", Value: c.OutputTimeout.String()},
		{Name: "multi-max-commands", Value: itoa(int64(c.MultiMaxCommands))},
		{Name: "multi-max-bytes", Value: itoa(c.MultiMaxBytes)},
		{Name: "event-loops", Value: itoa(int64(c.EventLoops))},
		{Name: "requirepass", Value: pass},
		{Name: "aclfile", Value: c.ACLFile},
		{Name: "acllog-max-len", Value: itoa(int64(cmp.Or(c.ACLLogMaxLen, commands.DefaultACLLogMaxLen)))},
		{Name: "shutdown-timeout", Value: c.ShutdownTimeout.String()},
		{Name: "tls-cert-file", Value: c.TLSCertFile},
		{Name: "tls-key-file", Value: c.TLSKeyFile},
		{Name: "tls-ca-cert-file", Value: c.TLSCACertFile},
		{Name: "tls-client-cert-file", Value: c.TLSClientCertFile},
		{Name: "tls-client-key-file", Value: c.TLSClientKeyFile},
		{Name: "maxmemory", Value: itoa(c.MaxMemory)},
		{Name: "maxmemory-policy", Value: c.MaxMemoryPolicy},
		{Name: "data-dir", Value: c.DataDir},
		{Name: "fsync", Value: c.Fsync},
		{Name: "persist-max-pending-bytes", Value: itoa(c.PersistMaxPending)},
		{Name: "checkpoint-bytes", Value: itoa(c.CheckpointBytes)},
		{Name: "load-damaged-wal", Value: map[bool]string{false: "no", true: "yes"}[c.LoadDamagedWAL]},
		{Name: "slowlog-log-slower-than", Value: itoa(slowlogMicros(c.SlowlogSlowerThan))},
		{Name: "slowlog-max-len", Value: itoa(int64(max(c.SlowlogMaxLen, 0)))},
		{Name: "metrics-addr", Value: c.MetricsAddr},
		{Name: "metrics-user", Value: c.MetricsUser},
		{Name: "metrics-password", Value: map[bool]string{false: "", true: "********"}[c.MetricsPassword != ""]},
		{Name: "metrics-acl", Value: map[bool]string{false: "no", true: "yes"}[c.MetricsACL]},
		{Name: "rls-addr", Value: c.RLSAddr},
		{Name: "rls-config", Value: c.RLSConfig},
		{Name: "metrics-key-separator", Value: c.KeyPrefixSeparator},
		{Name: "metrics-top-prefixes", Value: itoa(int64(c.TopPrefixes))},
		{Name: "protected-mode", Value: map[bool]string{false: "yes", true: "no"}[c.DisableProtectedMode]},
		{Name: "log-format", Value: c.LogFormat},
		{Name: "log-level", Value: c.LogLevel},
		// Read by tools such as redis-benchmark; cellserver keeps no RDB or AOF.
		{Name: "save", Value: ""},
		{Name: "appendonly", Value: map[bool]string{false: "no", true: "yes"}[c.DataDir != ""]},
		{Name: "replicaof", Value: c.ReplicaOf},
		{Name: "masteruser", Value: c.MasterUser},
		{Name: "masterauth", Value: map[bool]string{false: "", true: "********"}[c.MasterAuth != ""]},
		{Name: "repl-backlog-size", Value: itoa(c.ReplBacklogSize)},
		{Name: "replica-priority", Value: itoa(int64(max(c.ReplicaPriority, 0)))},
		{Name: "replica-announce-ip", Value: c.ReplicaAnnounceIP},
		{Name: "replica-announce-port", Value: itoa(int64(c.ReplicaAnnouncePort))},
		{Name: "replica-read-only", Value: map[bool]string{false: "yes", true: "no"}[c.ReplicaWritable]},
		{Name: "replica-serve-stale-data", Value: map[bool]string{false: "yes", true: "no"}[c.ReplicaNoStaleData]},
		{Name: "min-replicas-to-write", Value: itoa(int64(c.MinReplicasToWrite))},
		{Name: "min-replicas-max-lag", Value: itoa(int64(c.MinReplicasMaxLag / time.Second))},
		{Name: "sync-replicas", Value: itoa(int64(c.SyncReplicas))},
		{Name: "sync-replicas-timeout", Value: itoa(c.SyncReplicasTimeout.Milliseconds())},
		{Name: "tls-replication", Value: map[bool]string{false: "no", true: "yes"}[c.TLSReplication]},
		{Name: "cluster-enabled", Value: map[bool]string{false: "no", true: "yes"}[c.ClusterEnabled]},
		{Name: "cluster-config-file", Value: c.ClusterConfigFile},
		{Name: "cluster-pubsub-queue-limit", Value: itoa(c.ClusterPubSubQueueLimit)},
		{Name: "policies", Value: c.Policies},
	}
}

func parsePolicy(s string) (keyspace.Policy, error) {
	switch s {
	case "allkeys-lru":
		return keyspace.AllKeysLRU, nil
	case "noeviction":
		return keyspace.NoEviction, nil
	case "allkeys-lfu":
		return keyspace.AllKeysLFU, nil
	}
	return 0, fmt.Errorf("unknown maxmemory policy %q", s)
}

// slowlogMicros is the Redis-style figure: -1 off, 0 everything, else µs.
func slowlogMicros(d time.Duration) int64 {
	switch {
	case d < 0:
		return -1
	case d < time.Microsecond:
		return 0
	}
	return d.Microseconds()
}
