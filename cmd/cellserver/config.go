package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/replication"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
)

// option is one setting, settable as a flag (--name), an environment
// variable (CELLSERVER_NAME) and a config-file line ("name value").
// Precedence: flag > environment > file > default.
type option struct {
	name  string
	def   string
	usage string
	set   func(c *server.Config, v string) error
}

func envName(opt string) string {
	return "CELLSERVER_" + strings.ToUpper(strings.ReplaceAll(opt, "-", "_"))
}

// setter is an option's set function: parse reads the value, which is
// stored at p(c).
func setter[T any](p func(*server.Config) *T, parse func(string) (T, error)) func(*server.Config, string) error {
	return func(c *server.Config, v string) error {
		x, err := parse(v)
		if err != nil {
			return err
		}
		*p(c) = x
		return nil
	}
}

func setString(p func(*server.Config) *string) func(*server.Config, string) error {
	return setter(p, func(v string) (string, error) { return v, nil })
}

func setInt(p func(*server.Config) *int) func(*server.Config, string) error {
	return setter(p, parseInt)
}

func setInt64(p func(*server.Config) *int64) func(*server.Config, string) error {
	return setter(p, parseBytes)
}

func setDuration(p func(*server.Config) *time.Duration) func(*server.Config, string) error {
	return setter(p, parseDuration)
}

func setBool(p func(*server.Config) *bool) func(*server.Config, string) error {
	return setter(p, parseBool)
}

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("not an integer: %q", v)
	}
	return n, nil
}

// parseBytes accepts an integer with an optional k/kb/m/mb/g/gb suffix
// (powers of 1024, as in redis.conf).
func parseBytes(v string) (int64, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}, {"b", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a size in bytes: %q", v)
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, fmt.Errorf("size out of range: %q (at most %d bytes)", v, int64(math.MaxInt64))
	}
	return n * mult, nil
}

// parseDuration accepts plain seconds, as redis.conf, or a Go duration.
func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("not a duration: %q", v)
	}
	return d, nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "yes", "true", "1", "on":
		return true, nil
	case "no", "false", "0", "off":
		return false, nil
	}
	return false, fmt.Errorf("not yes or no: %q", v)
}

// setSlowlog maps Redis's microseconds (0: everything, negative: off).
func setSlowlog(c *server.Config, v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("not an integer: %q", v)
	}
	switch {
	case n < 0:
		c.SlowlogSlowerThan = -1
	case n == 0:
		c.SlowlogSlowerThan = time.Nanosecond
	default:
		c.SlowlogSlowerThan = time.Duration(n) * time.Microsecond
	}
	return nil
}

// setUsers sets the ACL users of "user" lines (joined by newlines when
// the config file has several).
func setUsers(c *server.Config, v string) error {
	c.Users = nil
	for _, u := range strings.Split(v, "\n") {
		if u = strings.TrimSpace(u); u != "" {
			c.Users = append(c.Users, u)
		}
	}
	return nil
}

// setPriority sets replica-priority: server.Config's zero is the default
// (100), so 0 ("never promote") is stored as -1.
func setPriority(c *server.Config, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("not a priority (an integer of 0 or more): %q", v)
	}
	if n == 0 {
		n = -1
	}
	c.ReplicaPriority = n
	return nil
}

// setSyncTimeout sets sync-replicas-timeout: milliseconds, or a duration
// (commands.ParseSyncTimeout, as CONFIG SET takes it).
func setSyncTimeout(c *server.Config, v string) error {
	d, ok := commands.ParseSyncTimeout(v)
	if !ok {
		return fmt.Errorf("not a timeout (milliseconds, or a duration such as 500ms, from 1ms to 1h): %q", v)
	}
	c.SyncReplicasTimeout = d
	return nil
}

// setNegBool sets a "Disable..." field from a yes/no option.
func setNegBool(p func(*server.Config) *bool) func(*server.Config, string) error {
	set := setBool(p)
	return func(c *server.Config, v string) error {
		if err := set(c, v); err != nil {
			return err
		}
		*p(c) = !*p(c)
		return nil
	}
}

// sizeString writes a byte count as parseBytes reads it, with the largest
// unit that divides it ("16mb"): how --help shows a default size.
func sizeString(n int64) string {
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}} {
		if n != 0 && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// options lists every setting. --help prints them in this order. A
// default is the constant of the package that owns the setting, written
// as the option is parsed; the ones written here ("0", "", "no", and "yes"
// for the options that set a Disable... field) mean the zero values of
// their fields.
var options = []option{
	{"addr", server.DefaultAddr, "TCP address to listen on", setString(func(c *server.Config) *string { return &c.Addr })},
	{"requirepass", "", "require AUTH with this password (shown masked by CONFIG GET)", setString(func(c *server.Config) *string { return &c.Password })},
	{"aclfile", "", "ACL users from this file (Redis's format: \"user name rules...\" lines), reloaded by ACL LOAD, written by ACL SAVE", setString(func(c *server.Config) *string { return &c.ACLFile })},
	{"user", "", "an ACL user, \"name rules...\" (in the config file: one \"user name rules...\" line each; not with aclfile)", setUsers},
	{"acllog-max-len", strconv.Itoa(commands.DefaultACLLogMaxLen), "entries kept by ACL LOG", setInt(func(c *server.Config) *int { return &c.ACLLogMaxLen })},
	{"protected-mode", "yes", "without a password, refuse clients from non-loopback addresses", setNegBool(func(c *server.Config) *bool { return &c.DisableProtectedMode })},
	{"tls-cert-file", "", "serve TLS only, with this PEM certificate", setString(func(c *server.Config) *string { return &c.TLSCertFile })},
	{"tls-key-file", "", "PEM private key of --tls-cert-file", setString(func(c *server.Config) *string { return &c.TLSKeyFile })},
	{"tls-ca-cert-file", "", "require client certificates signed by these PEM CAs", setString(func(c *server.Config) *string { return &c.TLSCACertFile })},
	{"tls-client-cert-file", "", "PEM certificate --healthcheck presents when --tls-ca-cert-file asks for one (empty: --tls-cert-file, which must then allow client auth)", setString(func(c *server.Config) *string { return &c.TLSClientCertFile })},
	{"tls-client-key-file", "", "PEM private key of --tls-client-cert-file", setString(func(c *server.Config) *string { return &c.TLSClientKeyFile })},
	{"maxclients", strconv.Itoa(resp.DefaultMaxClients), "maximum concurrent client connections", setInt(func(c *server.Config) *int { return &c.MaxClients })},
	{"timeout", "0", "close clients idle this long (seconds or a duration; 0: never)", setDuration(func(c *server.Config) *time.Duration { return &c.IdleTimeout })},
	{"proto-max-bulk-len", sizeString(resp.DefaultMaxBulkLen), "largest accepted argument, in bytes", setInt64(func(c *server.Config) *int64 { return &c.MaxBulkLen })},
	{"proto-max-multibulk-len", strconv.Itoa(resp.DefaultMaxMultiBulkLen), "most arguments in one command", setInt64(func(c *server.Config) *int64 { return &c.MaxMultiBulkLen })},
	{"client-query-buffer-limit", sizeString(resp.DefaultMaxQueryBuffer), "most unparsed bytes buffered per client", setInt64(func(c *server.Config) *int64 { return &c.MaxQueryBuffer })},
	{"client-output-buffer-limit", sizeString(resp.DefaultMaxOutputBuffer), "disconnect a client whose replies to one batch exceed this many bytes", setInt64(func(c *server.Config) *int64 { return &c.MaxOutputBuffer })},
	{"multi-max-commands", strconv.Itoa(server.DefaultMultiMaxCommands), "most commands one client may queue between MULTI and EXEC; the next gets an error and EXEC aborts", setInt(func(c *server.Config) *int { return &c.MultiMaxCommands })},
	{"multi-max-bytes", strconv.FormatInt(server.DefaultMultiMaxBytes, 10), "most bytes (arguments plus 24 per argument) one client may queue between MULTI and EXEC", setInt64(func(c *server.Config) *int64 { return &c.MultiMaxBytes })},
	{"client-output-timeout", resp.DefaultOutputTimeout.String(), "disconnect a client that does not read its replies for this long", setDuration(func(c *server.Config) *time.Duration { return &c.OutputTimeout })},
	{"event-loops", "0", "epoll event loops serving TCP clients (0: one per CPU; -1: a goroutine per client instead)", setInt(func(c *server.Config) *int { return &c.EventLoops })},
	{"databases", strconv.Itoa(keyspace.DefaultDatabases), "number of databases (SELECT 0..n-1)", setInt(func(c *server.Config) *int { return &c.Databases })},
	{"shards", strconv.Itoa(keyspace.DefaultShards), "lock shards per database (rounded up to a power of two)", setInt(func(c *server.Config) *int { return &c.Shards })},
	{"shutdown-timeout", server.DefaultShutdownTimeout.String(), "how long shutdown waits for in-flight commands", setDuration(func(c *server.Config) *time.Duration { return &c.ShutdownTimeout })},
	{"maxmemory", "0", "cap on the limiter state's memory, in bytes (k/m/g suffixes; 0: no cap)", setInt64(func(c *server.Config) *int64 { return &c.MaxMemory })},
	{"maxmemory-policy", server.DefaultMaxMemoryPolicy, "at maxmemory: allkeys-lru (evict; the key starts afresh), allkeys-lfu (evict the least frequently used) or noeviction (refuse new keys)", setString(func(c *server.Config) *string { return &c.MaxMemoryPolicy })},
	{"data-dir", "", "keep state in a Pebble database in this directory (in memory only when empty)", setString(func(c *server.Config) *string { return &c.DataDir })},
	{"fsync", server.DefaultFsync, "with --data-dir: always (reply after the change is on disk), everysec or no", setString(func(c *server.Config) *string { return &c.Fsync })},
	{"checkpoint-bytes", sizeString(changelog.DefaultCheckpointBytes), "with --data-dir: a checkpoint (the keys changed since the previous one, written to the store) starts once the change log written since the previous one passes this size; the log, and what a restart after a crash replays, stay about this size", setInt64(func(c *server.Config) *int64 { return &c.CheckpointBytes })},
	{"persist-max-pending-bytes", sizeString(persistence.DefaultMaxPending), "with --data-dir: cap on the changes queued for the disk and not yet written; past it, write commands wait (their event loop stops reading clients) until the disk catches up", setInt64(func(c *server.Config) *int64 { return &c.PersistMaxPending })},
	{"load-damaged-wal", "no", "with --data-dir: start even if the newest WAL is damaged before its end, dropping the changes after the damage (logged, counted in INFO persistence)", setBool(func(c *server.Config) *bool { return &c.LoadDamagedWAL })},
	{"slowlog-log-slower-than", strconv.FormatInt(commands.DefaultSlowlogSlowerThan.Microseconds(), 10), "log commands slower than this many microseconds in SLOWLOG (0: all, negative: none)", setSlowlog},
	{"slowlog-max-len", strconv.Itoa(commands.DefaultSlowlogMaxLen), "entries kept by SLOWLOG", setInt(func(c *server.Config) *int { return &c.SlowlogMaxLen })},
	{"metrics-addr", "", "serve Prometheus /metrics, /healthz, /readyz and the live /dashboard over HTTP on this address (off when empty)", setString(func(c *server.Config) *string { return &c.MetricsAddr })},
	{"metrics-user", "", "with --metrics-password: the metrics listener asks for HTTP basic authentication with this user name (all paths but /healthz and /readyz)", setString(func(c *server.Config) *string { return &c.MetricsUser })},
	{"metrics-password", "", "with --metrics-user: the password of the metrics listener's basic authentication (shown masked by CONFIG GET)", setString(func(c *server.Config) *string { return &c.MetricsPassword })},
	{"metrics-acl", "no", "the metrics listener also accepts, by HTTP basic authentication, the ACL users that have a password and may run INFO (with no --metrics-user: only them)", setBool(func(c *server.Config) *bool { return &c.MetricsACL })},
	{"metrics-key-separator", string(rune(commands.DefaultKeyPrefixSeparator)), "a key's prefix, for the most-limited-prefixes metric, ends at this byte", setString(func(c *server.Config) *string { return &c.KeyPrefixSeparator })},
	{"metrics-top-prefixes", strconv.Itoa(commands.DefaultTopPrefixes), "how many most-limited key prefixes the metrics report", setInt(func(c *server.Config) *int { return &c.TopPrefixes })},
	{"replicaof", "", "start as a replica of this primary: \"host port\" (REPLICAOF at run time; empty: a primary)", setString(func(c *server.Config) *string { return &c.ReplicaOf })},
	{"masteruser", "", "user name a replica authenticates with to its primary (with --masterauth)", setString(func(c *server.Config) *string { return &c.MasterUser })},
	{"masterauth", "", "password a replica authenticates with to its primary", setString(func(c *server.Config) *string { return &c.MasterAuth })},
	{"repl-backlog-size", sizeString(replication.DefaultBacklogSize), "replication backlog: a replica whose link drops resumes from it (partial resync) if it is behind by less than this", setInt64(func(c *server.Config) *int64 { return &c.ReplBacklogSize })},
	{"replica-priority", strconv.Itoa(replication.DefaultPriority), "Sentinel promotes the replica with the lowest priority first; 0: never promote this node", setPriority},
	{"replica-announce-ip", "", "address a replica reports to its primary (and so to Sentinel) instead of its own", setString(func(c *server.Config) *string { return &c.ReplicaAnnounceIP })},
	{"replica-announce-port", "0", "client port a replica reports to its primary instead of its own (0: its own)", setInt(func(c *server.Config) *int { return &c.ReplicaAnnouncePort })},
	{"replica-read-only", "yes", "a replica refuses writes with READONLY (no: it takes local writes, not passed on)", setNegBool(func(c *server.Config) *bool { return &c.ReplicaWritable })},
	{"replica-serve-stale-data", "yes", "a replica serves its data while its link is down (no: MASTERDOWN)", setNegBool(func(c *server.Config) *bool { return &c.ReplicaNoStaleData })},
	{"min-replicas-to-write", "0", "a primary refuses writes with NOREPLICAS unless this many replicas acknowledged within --min-replicas-max-lag (0: off)", setInt(func(c *server.Config) *int { return &c.MinReplicasToWrite })},
	{"sync-replicas", "0", "a primary holds the reply of every command that changed a key until this many replicas acknowledged it (0: asynchronous replication); see docs/high-availability.md", setInt(func(c *server.Config) *int { return &c.SyncReplicas })},
	{"sync-replicas-timeout", replication.DefaultSyncTimeout.String(), "with --sync-replicas: a reply not acknowledged this long becomes NOREPLICAS and writes are refused until the replicas catch up (milliseconds, or a duration such as 500ms)", setSyncTimeout},
	{"tls-replication", "no", "a replica connects to its primary over TLS, verifying it with --tls-ca-cert-file and presenting --tls-client-cert-file (else --tls-cert-file)", setBool(func(c *server.Config) *bool { return &c.TLSReplication })},
	{"min-replicas-max-lag", strconv.Itoa(int(commands.DefaultMinReplicasMaxLag / time.Second)), "seconds: see --min-replicas-to-write", setDuration(func(c *server.Config) *time.Duration { return &c.MinReplicasMaxLag })},
	{"cluster-enabled", "no", "cluster mode: route keys by hash slot (MOVED, CROSSSLOT) over a topology set with CELLCLUSTER CONFIG; only database 0", setBool(func(c *server.Config) *bool { return &c.ClusterEnabled })},
	{"cluster-config-file", "", "with --cluster-enabled: load the topology (DFLYCLUSTER CONFIG JSON) from this file at start and keep the last one installed in it; the node id is kept in FILE.myid", setString(func(c *server.Config) *string { return &c.ClusterConfigFile })},
	{"cluster-pubsub-queue-limit", sizeString(cluster.DefaultBusQueueLimit), "with --cluster-enabled: bytes queued at most per pub/sub link to another node; a PUBLISH or SPUBLISH past it is not sent to that node (counted in INFO cluster)", setInt64(func(c *server.Config) *int64 { return &c.ClusterPubSubQueueLimit })},
	{"cluster-node-id", "", "with --cluster-enabled: this node's id in the topology, 40 lower-case hex digits as Redis's (default: the one in FILE.myid, else a random one)", setString(func(c *server.Config) *string { return &c.ClusterNodeID })},
	{"redis-version", commands.DefaultRedisVersion, "the Redis version INFO and HELLO report, which clients gate features on (behaviour stays Redis 7.0.15's); see docs/commands.md", setString(func(c *server.Config) *string { return &c.RedisVersion })},
	{"log-format", server.DefaultLogFormat, "log format: text or json", setString(func(c *server.Config) *string { return &c.LogFormat })},
	{"log-level", server.DefaultLogLevel, "log level: debug, info, warn or error", setString(func(c *server.Config) *string { return &c.LogLevel })},
	{"policies", "", "read CL.APPLY's named policies from this YAML file (an invalid file stops the start, listing every problem); CL.POLICY RELOAD and SIGHUP read it again", setString(func(c *server.Config) *string { return &c.Policies })},
	{"rls-addr", "", "serve Envoy's rate limit service (gRPC envoy.service.ratelimit.v3) on this address, with the RESP port's TLS and, with --requirepass, a token check (off when empty)", setString(func(c *server.Config) *string { return &c.RLSAddr })},
	{"rls-config", "", "with --rls-addr: envoyproxy/ratelimit configuration, a YAML file or a directory of them (one domain each)", setString(func(c *server.Config) *string { return &c.RLSConfig })},
	{"rls-response-headers", "no", "with --rls-addr: add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset to the responses (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED)", setBool(func(c *server.Config) *bool { return &c.RLSResponseHeaders })},
}

// loadConfig builds the configuration from defaults, an optional config
// file, the environment and the command line, in increasing precedence. It
// reports every problem at once. done means exit with code (help, version,
// errors). health means --healthcheck: the caller probes the server cfg
// describes instead of running one; loadConfig itself never dials.
func loadConfig(args []string, env func(string) string, stdout, stderr io.Writer) (cfg server.Config, code int, done, health bool) {
	fs := flag.NewFlagSet("cellserver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	showVersion := fs.Bool("version", false, "print the version and exit")
	healthFlag := fs.Bool("healthcheck", false, "check that the configured server answers PING, then exit")
	configPath := fs.String("config", "", "read settings from this file (lines of \"name value\")")
	vals := map[string]*string{}
	for _, o := range options {
		vals[o.name] = fs.String(o.name, o.def, o.usage)
	}
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: cellserver [options]\n"+
			"       cellserver cluster COMMAND ... (create, add-node, reshard, rebalance, check, info: cellserver cluster --help)\n\n"+
			"A Redis-protocol rate-limit server answering CL.THROTTLE exactly as redis-cell.\n\n"+
			"Every option can also be set as an environment variable (shown in brackets)\n"+
			"or as a line \"name value\" in the --config file.\n"+
			"Precedence: command line > environment > config file > default.\n\nOptions:\n")
		fmt.Fprintf(w, "  --config FILE\n        %s [%s]\n", "read settings from this file", envName("config"))
		for _, o := range options {
			def := o.def
			if def == "" {
				def = `""`
			}
			fmt.Fprintf(w, "  --%s VALUE\n        %s (default %s) [%s]\n", o.name, o.usage, def, envName(o.name))
		}
		fmt.Fprintf(w, "  --healthcheck\n        connect to the configured server, PING it and exit 0 if it answers (container HEALTHCHECK)\n")
		fmt.Fprintf(w, "  --version\n        print the version and exit\n  --help\n        print this help and exit\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return cfg, 0, true, false
		}
		fmt.Fprintf(stderr, "cellserver: %v\n\n", err)
		usage(stderr)
		return cfg, 2, true, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cellserver: unexpected argument %q (options start with --)\n", fs.Arg(0))
		return cfg, 2, true, false
	}
	if *showVersion {
		fmt.Fprintf(stdout, "cellserver %s\n", version)
		return cfg, 0, true, false
	}

	// Layer the sources: default < file < environment < flag.
	final := map[string]string{}
	source := map[string]string{}
	for _, o := range options {
		final[o.name], source[o.name] = o.def, "default"
	}
	var errs []string
	path := *configPath
	if path == "" {
		path = env(envName("config"))
	}
	if path != "" {
		fileVals, ferrs := readConfigFile(path)
		errs = append(errs, ferrs...)
		cfg.ConfigFile = path // INFO config_file
		for k, v := range fileVals {
			final[k], source[k] = v, "config file "+path
		}
	}
	for _, o := range options {
		if v := env(envName(o.name)); v != "" {
			final[o.name], source[o.name] = v, "environment "+envName(o.name)
		}
	}
	fs.Visit(func(f *flag.Flag) {
		if _, ok := vals[f.Name]; ok {
			final[f.Name], source[f.Name] = f.Value.String(), "flag --"+f.Name
		}
	})
	for _, o := range options {
		if err := o.set(&cfg, final[o.name]); err != nil {
			errs = append(errs, fmt.Sprintf("%s (from %s): %v", o.name, source[o.name], err))
		}
	}
	// The store behind --data-dir and the exporter behind --metrics-addr
	// are wired here, so that package server links neither.
	// The data directory holds a change log (every change, appended) and
	// pebble, which receives checkpoints of the keys changed.
	cfg.OpenStore = changelog.Opener(pebblestore.OpenStore, changelog.Options{CheckpointBytes: cfg.CheckpointBytes})
	cfg.Metrics = metrics.ServerHandler
	cfg.RLS = envoyrls.New
	if err := cfg.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			errs = append(errs, line)
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(stderr, "cellserver: invalid configuration (%d problems):\n", len(errs))
		for _, e := range errs {
			fmt.Fprintf(stderr, "  - %s\n", e)
		}
		return cfg, 2, true, false
	}
	cfg.Logger = server.NewLogger(cfg, stderr)
	if path != "" {
		rw, err := newConfigRewriter(path, source, cfg.Logger)
		if err != nil {
			fmt.Fprintf(stderr, "cellserver: config file: %v\n", err)
			return cfg, 2, true, false
		}
		cfg.ConfigRewrite = rw.rewrite
	}
	return cfg, 0, false, *healthFlag
}

// readConfigFile reads "name value" lines; blank lines and lines starting
// with # are ignored; values may be double-quoted.
func readConfigFile(path string) (map[string]string, []string) {
	f, err := os.Open(path)
	if err != nil {
		return nil, []string{fmt.Sprintf("config file: %v", err)}
	}
	defer f.Close()
	known := map[string]bool{}
	for _, o := range options {
		known[o.name] = true
	}
	vals := map[string]string{}
	var errs []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, _ := strings.Cut(line, " ")
		name, value = strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(value)
		if uq, err := strconv.Unquote(value); err == nil && strings.HasPrefix(value, `"`) {
			value = uq
		}
		if !known[name] {
			errs = append(errs, fmt.Sprintf("%s:%d: unknown option %q", path, n, name))
			continue
		}
		if name == "user" && vals[name] != "" {
			// Several users: one line each, kept in order.
			value = vals[name] + "\n" + value
		}
		vals[name] = value
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Sprintf("config file %s: %v", path, err))
	}
	return vals, errs
}
