// Package server assembles cellserver: the keyspace, the command table and
// the RESP listener, configured by one Config. cmd/cellserver maps flags onto
// a Config and calls Run; tests start a Server on 127.0.0.1:0 the same way.
//
// config.go holds Config, its defaults, its validation and the settings
// CONFIG GET shows; server.go holds New, which assembles the parts (the
// keyspace's journal chain among them), and the lifecycle (Listen, Serve,
// Run, Shutdown, Close); tls.go and rls.go the TLS material and the Envoy
// front door.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/replication"
	"github.com/cellserver/cellserver/resp"
)

// Server is a running cellserver.
type Server struct {
	cfg Config
	tls *tls.Config // nil: plain TCP
	// clientTLS is how the Envoy front door dials the RESP port; nil
	// without TLS.
	clientTLS *tls.Config
	cmds      *commands.Service
	net       *resp.Server

	mu        sync.Mutex // guards ln, metricsLn, httpSrv
	ln        net.Listener
	metricsLn net.Listener
	httpSrv   *http.Server
	ready     atomic.Bool // serving and not shutting down (/readyz)
	storeOnce sync.Once

	store  persistence.Store   // nil without DataDir
	writer *persistence.Writer // nil without DataDir
	repl   *replication.Replication
	// cluster is the node's cluster state; nil unless ClusterEnabled.
	cluster *cluster.State
	// bus is the node's pub/sub links to the other nodes; nil unless
	// ClusterEnabled. Serve starts it, stopBackground closes it.
	bus *cluster.Bus

	bgCancel context.CancelFunc
	bgDone   chan struct{}

	rls rlsState // the Envoy front door, when RLSAddr is set

	shut shutdownState // SHUTDOWN (shutdown.go)
}

// New builds a Server from cfg; it does not listen yet. When it fails
// after opening the store of DataDir, it closes it again.
func New(cfg Config) (_ *Server, err error) {
	tm, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
		if cfg.LogFormat != "" || cfg.LogLevel != "" {
			cfg.Logger = NewLogger(cfg, logOutput)
		}
	}
	cfg = cfg.withDefaults()
	pols, err := loadPolicies(cfg.Policies)
	if err != nil {
		return nil, err
	}
	var (
		store  persistence.Store
		writer *persistence.Writer
		loaded persistence.LoadStats
		// walDamage is what the store found in its newest WAL.
		walDamage persistence.WALDamage
		// persisted is writer in the journal chain; nil without DataDir.
		persisted keyspace.Journal
	)
	policy, _ := parsePolicy(cfg.MaxMemoryPolicy)
	kcfg := keyspace.Config{Databases: cfg.Databases, Shards: cfg.Shards, MaxMemory: cfg.MaxMemory, Policy: policy,
		SlotIndex: cfg.ClusterEnabled}
	if cfg.DataDir != "" {
		mode, _ := persistence.ParseFsync(cfg.Fsync)
		st, err := cfg.OpenStore(cfg.DataDir, persistence.OpenOptions{Logger: cfg.Logger, LoadDamagedWAL: cfg.LoadDamagedWAL})
		if err != nil {
			return nil, fmt.Errorf("data directory %s: %w", cfg.DataDir, err)
		}
		store = st
		writer = persistence.NewWriter(store, mode, cfg.Logger)
		writer.SetMaxPending(cfg.PersistMaxPending)
		persisted = writer
		kcfg.Room = writer // the sweep and slot deletes respect the queue's cap
		_, kcfg.TrackChanges = st.(persistence.Checkpointer)
	}
	if store != nil {
		defer func() {
			if err != nil { // New's result, not the store's open error in the block above
				store.Close()
			}
		}()
	}
	ks, err := keyspace.New(kcfg)
	if err != nil {
		return nil, err
	}
	if store != nil {
		now := time.Now
		if cfg.Clock != nil {
			now = cfg.Clock
		}
		loaded, err = persistence.Load(store, ks, now().UnixMilli())
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", cfg.DataDir, err)
		}
		if wc, ok := store.(persistence.WALChecker); ok {
			walDamage = wc.WALDamage() // a log replayed at the load reports its damage then
		}
		cfg.Logger.Info("loaded persisted state", "dir", cfg.DataDir, "keys", loaded.Keys,
			"expired_dropped", loaded.Expired, "duration", loaded.Duration.String())
		if loaded.SkippedDeltas > 0 {
			cfg.Logger.Warn("persistence: stream changes of the change log did not apply to their key as loaded and were skipped (expected only for a stream deleted and made again after the checkpoint read it, which a later record restores)",
				"skipped", loaded.SkippedDeltas)
		}
		if cp, ok := store.(persistence.Checkpointer); ok {
			// Checkpoints read the changed keys from here on.
			if err := cp.Attach(ks); err != nil {
				return nil, fmt.Errorf("loading %s: %w", cfg.DataDir, err)
			}
		}
	}
	var durability commands.Durability
	var persistInfo func() []string
	var writeErr, admitWrite func() error
	if writer != nil {
		writeErr = writer.Failing
		admitWrite = writer.Admit // waits while the queue is over its cap
		if writer.Mode() == persistence.FsyncAlways {
			durability = writer
		}
		persistInfo = func() []string {
			return persistence.Info(cfg.DataDir, writer, store, loaded, walDamage)
		}
	}
	rtls := cfg.replicationTLS(tm)
	var waitRoom func()
	if writer != nil {
		waitRoom = writer.WaitRoom
	}
	repl, err := replication.New(replication.Config{Keyspace: ks, BacklogSize: cfg.ReplBacklogSize, TLS: rtls,
		AnnounceIP: cfg.ReplicaAnnounceIP, AnnouncePort: cfg.ReplicaAnnouncePort,
		MasterUser: cfg.MasterUser, MasterAuth: cfg.MasterAuth, Logger: cfg.Logger, Clock: cfg.Clock,
		WaitRoom:  waitRoom,
		MaxFrame:  cfg.MaxBulkLen, // a frame from the primary: proto-max-bulk-len (+ replication.FrameOverhead)
		MaxChange: cfg.MaxMemory,  // a change split into frames: at most the whole memory cap (none without one)
		// Replicas are clients (Redis): their links count towards
		// maxclients (commands.Service.Refuse counts them with the others).
		MaxReplicas: cfg.MaxClients})
	if err == nil {
		repl.SetSync(cfg.SyncReplicas, cfg.SyncReplicasTimeout)
	}
	if err != nil {
		return nil, err
	}
	var cl *cluster.State
	var slots cluster.SlotStore
	var bus *cluster.Bus
	var psBus commands.PubSubBus // nil unless cluster mode (not a nil *cluster.Bus)
	if cfg.ClusterEnabled {
		slots = cluster.KeyspaceStore{Keyspace: ks}
		cl, err = cluster.New(cluster.Config{NodeID: cfg.ClusterNodeID, ConfigFile: cfg.ClusterConfigFile, Logger: cfg.Logger, Store: slots,
			Migrations: cfg.migrationConfig(ks, rtls)})
		if err != nil {
			return nil, err
		}
		// The pub/sub links to the other nodes authenticate as a replica
		// does (masteruser/masterauth), else with this node's own
		// requirepass, which the nodes of a cluster share; TLS with
		// tls-replication.
		user, pass := cfg.MasterUser, cfg.MasterAuth
		if pass == "" {
			user, pass = "", cfg.Password
		}
		bus = cluster.NewBus(cluster.BusConfig{State: cl, TLS: rtls, User: user, Password: pass,
			QueueLimit: cfg.ClusterPubSubQueueLimit, MaxMessage: cfg.MaxBulkLen, Logger: cfg.Logger})
		psBus = bus
	}
	var self *Server // for INFO rls, which reads the front door built by Listen
	var sv commands.Saver
	if store != nil {
		sv = saver{store}
	}
	cmds, err := commands.New(commands.Config{
		RLSInfo: func() []string {
			if self == nil {
				return nil
			}
			return self.rlsInfo()
		},
		Cluster:            cl,
		ClusterSlots:       slots,
		PubSubBus:          psBus,
		Replication:        repl,
		ReplicaPriority:    cfg.ReplicaPriority,
		ReplicaWritable:    cfg.ReplicaWritable,
		ReplicaNoStaleData: cfg.ReplicaNoStaleData,
		MinReplicasToWrite: cfg.MinReplicasToWrite,
		MinReplicasMaxLag:  cfg.MinReplicasMaxLag,
		Durability:         durability,
		PersistenceInfo:    persistInfo,
		WriteError:         writeErr,
		AdmitWrite:         admitWrite,
		Keyspace:           ks,
		Clock:              cfg.Clock,
		Settings:           cfg.Settings(),
		Version:            cfg.Version,
		RedisVersion:       cfg.RedisVersion,
		Password:           cfg.Password,
		ACLFile:            cfg.ACLFile,
		Users:              cfg.Users,
		ACLLogMaxLen:       cfg.ACLLogMaxLen,
		Logger:             cfg.Logger,
		ProtectedMode:      !cfg.DisableProtectedMode && cfg.Password == "",
		KeyPrefixSeparator: cfg.KeyPrefixSeparator[0],
		SlowlogSlowerThan:  cfg.SlowlogSlowerThan,
		SlowlogMaxLen:      cfg.SlowlogMaxLen,
		TopPrefixes:        cfg.TopPrefixes,
		Loopback:           cfg.Loopback,
		MultiMaxCommands:   cfg.MultiMaxCommands,
		MultiMaxBytes:      cfg.MultiMaxBytes,
		MaxStringLen:       cfg.MaxBulkLen,
		ConfigFile:         cfg.ConfigFile,
		ConfigRewrite:      configRewrite(cfg.ConfigRewrite, repl.ReplicaOfSetting, repl.SyncSettings),
		DumpValue:          persistence.EncodeValue,
		Policies:           pols,
		PolicyFile:         cfg.Policies,
		Saver:              sv,
		AOF:                aofSyncer(writer),
		Shutdown:           func(o commands.ShutdownOptions) error { return self.shutdownCommand(o) },
		AbortShutdown:      func() bool { return self.abortShutdown() },
	})
	if err != nil {
		return nil, err
	}
	// The write path: the keyspace tells this chain about every change,
	// with the changed key's shard lock held (a database's every shard lock
	// for FLUSHDB, all for FLUSHALL), right after the change and before
	// the command replies. Chain tells each link in turn, so all three see
	// the changes in one order, the keyspace's:
	//  1. cmds.Journal(): WATCH marks the clients watching the key dirty,
	//     and client-side caching sends its invalidations. Two atomic
	//     loads while nobody watches or tracks.
	//  2. persisted, the Writer (nil without DataDir): queues the change,
	//     encoded, for the store, numbered for WaitDurable (fsync always).
	//  3. repl.Journal(): appends the change's frame to the backlog, which
	//     gives it its replication offset, and wakes the replicas' senders
	//     (nothing until a first replica has come).
	// Persistence comes before replication as in Redis's propagateNow (the
	// AOF, then the replicas). Nothing depends on the order, though: no
	// link reads another's state (the Writer's sequence numbers and the
	// backlog's offsets are separate counts) and every link runs under the
	// same locks, so another client cannot see one link told and not the
	// next. A replica applies its primary's changes through this chain too,
	// but repl records nothing there: it appends the primary's frames to
	// its backlog itself (replication's link.applyChange). The Writer and
	// the backlog each encode a changed value (persistence.EncodeValue, in
	// different envelopes): encoding it once would save about 6 ns of the
	// 250 a change costs with both (replication's BenchmarkJournalChain),
	// and only with replicas, and the keyspace, which calls the chain, has
	// no encoding to share.
	// 4. cl.Journal() (cluster mode): the changes to slots migrating out
	//    of this node, queued for their target (cluster/migration.go).
	var migrating keyspace.Journal
	if cl != nil {
		migrating = cl.Journal()
	}
	ks.SetJournal(keyspace.Chain(cmds.Journal(), persisted, repl.Journal(), migrating))
	rcfg := cfg.respConfig()
	// A loop serves other clients while replies wait for fsync always or
	// for the replicas' acknowledgements (sync-replicas, which CONFIG SET
	// can turn on at any time).
	rcfg.HoldReplies = true
	if durability != nil {
		// fsync always: one sync per round covers as many clients as
		// possible.
		rcfg.GroupCommitPasses = 4
	}
	rcfg.Refuse = cmds.Refuse // protected mode refuses at accept
	rs := resp.NewServer(rcfg, cmds)
	cmds.SetNetwork(rs)
	self = &Server{cfg: cfg, tls: tm.server, clientTLS: rlsClientTLS(tm), cmds: cmds, net: rs, store: store, writer: writer, repl: repl, cluster: cl, bus: bus}
	self.shut.stopReq = make(chan struct{})
	return self, nil
}

// migrationConfig is what slot migrations out of this node need: the
// keyspace, and how to reach and authenticate to a target, as a replica
// reaches its primary (masteruser/masterauth, else the node's own
// requirepass, which the nodes of a cluster share; TLS with
// tls-replication).
func (cfg Config) migrationConfig(ks *keyspace.Keyspace, tc *tls.Config) cluster.MigrationConfig {
	mc := cluster.MigrationConfig{Keyspace: ks, User: cfg.MasterUser, Password: cfg.MasterAuth}
	if mc.Password == "" {
		mc.User, mc.Password = "", cfg.Password
	}
	if tc != nil {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: tc}
		mc.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return mc
}

// configRewrite adapts Config.ConfigRewrite to the commands layer: CONFIG
// REWRITE hands the file writer the settings that change at run time.
// replicaOf returns the replicaof setting ("" for a primary, "host port"
// for a replica); nil leaves the file's replicaof lines as they are.
func configRewrite(rewrite func([]commands.Setting) error, replicaOf func() string, syncSettings func() (int, time.Duration)) func() error {
	if rewrite == nil {
		return nil
	}
	return func() error {
		var runtime []commands.Setting
		if replicaOf != nil {
			runtime = append(runtime, commands.Setting{Name: "replicaof", Value: replicaOf()})
		}
		if syncSettings != nil {
			// CONFIG SET changes them; at their defaults, no line.
			n, timeout := syncSettings()
			v, t := "", ""
			if n != 0 {
				v = strconv.Itoa(n)
			}
			if timeout != replication.DefaultSyncTimeout {
				t = timeout.String()
			}
			runtime = append(runtime, commands.Setting{Name: "sync-replicas", Value: v},
				commands.Setting{Name: "sync-replicas-timeout", Value: t})
		}
		return rewrite(runtime)
	}
}

// Cluster returns the node's cluster state, nil unless ClusterEnabled.
func (s *Server) Cluster() *cluster.State { return s.cluster }

// Commands returns the command executor (for in-process tests).
func (s *Server) Commands() *commands.Service { return s.cmds }

// Listen opens the configured address; Addr then reports the real port.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	if s.tls != nil {
		ln = &tlsListener{Listener: ln, cfg: s.tls, idle: s.cfg.IdleTimeout}
	}
	var mln net.Listener
	if s.cfg.MetricsAddr != "" {
		if mln, err = net.Listen("tcp", s.cfg.MetricsAddr); err != nil {
			ln.Close()
			return fmt.Errorf("metrics: %w", err)
		}
	}
	if err := s.listenRLS(ln.Addr()); err != nil {
		ln.Close()
		if mln != nil {
			mln.Close()
		}
		return err
	}
	s.mu.Lock()
	s.ln, s.metricsLn = ln, mln
	s.mu.Unlock()
	return nil
}

// MetricsAddr returns the metrics listener's address, or nil when metrics
// are off or before Listen.
func (s *Server) MetricsAddr() net.Addr { return s.listenerAddr(&s.metricsLn) }

// Addr returns the listening address, or nil before Listen.
func (s *Server) Addr() net.Addr { return s.listenerAddr(&s.ln) }

// listenerAddr returns the address of *ln, a listener s.mu guards, or nil
// while there is none.
func (s *Server) listenerAddr(ln *net.Listener) net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *ln == nil {
		return nil
	}
	return (*ln).Addr()
}

// Serve accepts connections on the listener opened by Listen (opening it
// if needed) and runs background work, until Shutdown or Close. It returns
// resp.ErrServerClosed after a clean stop.
func (s *Server) Serve() error {
	if s.Addr() == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	if a, ok := s.Addr().(*net.TCPAddr); ok {
		s.repl.SetPort(a.Port)
		if s.cluster != nil {
			s.cluster.SetAddr(a.IP.String(), a.Port)
		}
	}
	if s.bus != nil {
		s.bus.Start()
	}
	if host, port, ok, _ := parseReplicaOf(s.cfg.ReplicaOf); ok && !s.repl.IsReplica() {
		s.repl.ReplicaOf(host, port)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.mu.Lock()
	s.bgCancel, s.bgDone = cancel, done
	ln, mln := s.ln, s.metricsLn
	if mln != nil {
		h := s.cfg.Metrics(MetricsSources{Commands: s.cmds, Network: s.net, Replication: s.repl,
			Writer: s.writer, Store: s.store, Clock: s.cfg.Clock, Ready: s.ready.Load, RLS: s.RLSStats,
			Cluster: s.cluster, Version: s.cfg.Version})
		if h == nil { // never http.DefaultServeMux
			h = http.NotFoundHandler()
		}
		if s.cfg.MetricsUser != "" || s.cfg.MetricsACL {
			h = basicAuth(h, s.metricsCredentials())
		}
		s.httpSrv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	}
	hs := s.httpSrv
	s.mu.Unlock()
	go func() {
		defer close(done)
		if s.writer != nil {
			go s.writer.Run(ctx)
		}
		s.cmds.Run(ctx)
	}()
	if hs != nil {
		go func() {
			if err := hs.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Logger.Error("metrics server stopped", "err", err)
			}
		}()
	}
	s.serveRLS()
	s.ready.Store(true)
	return s.net.Serve(ln)
}

// Shutdown stops accepting, lets in-flight commands finish and closes every
// connection, waiting at most until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	s.shutdownRLS(ctx) // first: its calls go through the RESP port
	err := s.net.Shutdown(ctx)
	s.stopBackground()
	return err
}

// Close stops everything at once.
func (s *Server) Close() error {
	s.ready.Store(false)
	s.closeRLS()
	err := s.net.Close()
	s.stopBackground()
	return err
}

func (s *Server) stopBackground() {
	s.mu.Lock()
	cancel, done, hs, mln := s.bgCancel, s.bgDone, s.httpSrv, s.metricsLn
	s.mu.Unlock()
	if hs != nil {
		_ = hs.Close()
	} else if mln != nil {
		_ = mln.Close()
	}
	if cancel != nil {
		cancel()
		<-done
	}
	if s.bus != nil {
		s.bus.Close()
	}
	if s.cluster != nil {
		s.cluster.Close() // its migrations out stop
	}
	s.closeStore()
}

func persistMode(c Config) string {
	if c.DataDir == "" {
		return "none"
	}
	return "pebble dir=" + c.DataDir + " fsync=" + c.Fsync
}

// ioModel says how client connections are served, for the startup log.
func (s *Server) ioModel() string {
	if n := s.net.EventLoops(); n > 0 && s.tls == nil {
		return fmt.Sprintf("%d event loops", n)
	}
	return "a goroutine each"
}

func isLoopbackAddr(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return false
}

// closeStore writes and syncs every pending change and closes the store,
// once.
func (s *Server) closeStore() {
	s.storeOnce.Do(func() {
		if s.writer == nil {
			return
		}
		s.writer.Close()
		if st := s.writer.Stats(); st.Err != nil {
			s.cfg.Logger.Error("persistence: changes may be lost", "err", st.Err)
		}
		if err := s.store.Close(); err != nil {
			s.cfg.Logger.Error("persistence: close failed", "err", err)
		}
	})
}

// Run listens, serves until ctx ends, then shuts down gracefully within
// cfg.ShutdownTimeout.
func (s *Server) Run(ctx context.Context) error {
	if s.Addr() == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	s.cfg.Logger.Info("cellserver started", "version", s.cfg.Version, "addr", s.Addr().String(),
		"tls", s.tls != nil, "metrics", s.cfg.MetricsAddr, "persistence", persistMode(s.cfg), "maxclients", s.cfg.MaxClients, "maxmemory", s.cfg.MaxMemory, "maxmemory-policy", s.cfg.MaxMemoryPolicy, "timeout", s.cfg.IdleTimeout.String(),
		"proto-max-bulk-len", s.cfg.MaxBulkLen, "client-query-buffer-limit", s.cfg.MaxQueryBuffer, "clients-served-by", s.ioModel())
	if s.cfg.Password == "" && !isLoopbackAddr(s.Addr()) {
		if s.cfg.DisableProtectedMode {
			s.cfg.Logger.Warn("WARNING: listening on a non-loopback address with no password and protected mode off: anyone who can reach " +
				s.Addr().String() + " can use and flush this server. Set --requirepass.")
		} else {
			s.cfg.Logger.Warn("WARNING: listening on a non-loopback address with no password: protected mode refuses every client " +
				"not on the loopback interface. Set --requirepass (or --protected-mode no on a trusted network).")
		}
	}
	if s.cluster != nil {
		v := s.cluster.View()
		if v.T == nil {
			s.cfg.Logger.Warn("cluster mode: no topology yet; commands with keys get CLUSTERDOWN until one is installed with CELLCLUSTER CONFIG", "node-id", v.ID)
		} else {
			s.cfg.Logger.Info("cluster mode", "node-id", v.ID, "shards", len(v.T.Shards), "listed", v.Me != nil, "master", v.Master)
		}
	}
	if m := s.MetricsAddr(); m != nil && !isLoopbackAddr(m) && s.cfg.MetricsUser == "" && !s.cfg.MetricsACL {
		s.cfg.Logger.Warn("WARNING: metrics on a non-loopback address: anyone who can reach " + m.String() +
			" can read /metrics and /dashboard (no password; key prefixes, traffic). Bind --metrics-addr to 127.0.0.1, set --metrics-user and --metrics-password, or firewall its port.")
	}
	errc := make(chan error, 1)
	s.shut.mu.Lock()
	s.shut.running = true
	s.shut.mu.Unlock()
	go func() { errc <- s.Serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		// SIGTERM: the replicas are given time to catch up as SHUTDOWN
		// gives them, unless a SHUTDOWN in progress did already.
		s.shut.mu.Lock()
		waited := s.shut.waited
		s.shut.mu.Unlock()
		if !waited {
			s.waitReplicas(nil)
		}
	case <-s.shut.stopReq: // SHUTDOWN (shutdown.go) did its part
	}
	s.cfg.Logger.Info("shutting down", "timeout", s.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, resp.ErrServerClosed) {
		return serr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	s.cfg.Logger.Info("stopped")
	return nil
}

// loadPolicies reads and validates the policy file at path (nil, nil
// without one).
func loadPolicies(path string) (*policy.Set, error) {
	if path == "" {
		return nil, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	set, err := policy.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("policies %s: %w", path, err)
	}
	return set, nil
}
