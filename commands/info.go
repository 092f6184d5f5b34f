package commands

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/replication"
	"github.com/cellserver/cellserver/resp"
)

// newRunID returns Redis's run_id: 40 random hex characters, drawn once
// per process (Redis's getRandomHexChars at startup).
func newRunID() string {
	var b [20]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// absPath is p made absolute, as Redis shows config_file; "" stays "".
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// RunID returns the server's run_id: 40 hex characters, random for each
// process and stable for its life. INFO server reports it.
func (s *Service) RunID() string { return s.runID }

// bytesToHuman is Redis's bytesToHuman (used_memory_human and friends):
// "123B" under 1 KiB, then two decimals and K, M, G, T, P or E.
func bytesToHuman(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + "B"
	}
	d := float64(n)
	for _, unit := range []string{"K", "M", "G", "T", "P"} {
		d /= 1024
		if d < 1024 {
			return fmt.Sprintf("%.2f%s", d, unit)
		}
	}
	return fmt.Sprintf("%.2fE", d/1024)
}

// ratio is a/b, or 0 when b is 0, for the *_ratio fields (Redis prints
// them with two decimals).
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// instSamples is how many samples the instantaneous_* figures average,
// taken every Config.SweepInterval (Redis: STATS_METRIC_SAMPLES, 16, every
// 100 ms).
const instSamples = 16

// instMetric is one of Redis's instantaneous metrics: a rate per second
// averaged over the last instSamples samples.
type instMetric struct {
	lastT   time.Duration // monotonic, 0 before the first sample
	lastV   int64
	samples [instSamples]float64
	idx     int
}

func (m *instMetric) add(now time.Duration, v int64) {
	if m.lastT != 0 && now > m.lastT {
		m.samples[m.idx] = float64(v-m.lastV) / (now - m.lastT).Seconds()
		m.idx = (m.idx + 1) % instSamples
	}
	m.lastT, m.lastV = now, v
}

func (m *instMetric) rate() float64 {
	var sum float64
	for _, s := range m.samples {
		sum += s
	}
	return sum / instSamples
}

// instStats are the instantaneous_* figures of INFO stats, sampled by Run.
type instStats struct {
	mu            sync.Mutex // guards the metrics
	ops, in, out  instMetric
	peakMemory    atomic.Int64 // used_memory_peak
	startupMemory int64        // used_memory_startup
}

// sample takes one sample of the instantaneous metrics and of the peak
// memory. It runs every sweep interval.
func (s *Service) sample() {
	now := time.Since(s.monoBase)
	var in, out int64
	if n := s.net.Load(); n != nil {
		st := n.Stats()
		in, out = st.NetInputBytes, st.NetOutputBytes
	}
	s.stats.inst.mu.Lock()
	s.stats.inst.ops.add(now, s.stats.cmdsTotal.Load())
	s.stats.inst.in.add(now, in)
	s.stats.inst.out.add(now, out)
	s.stats.inst.mu.Unlock()
	s.notePeak(heapObjects())
}

// notePeak raises used_memory_peak to used if it is higher.
func (s *Service) notePeak(used int64) {
	for {
		p := s.stats.inst.peakMemory.Load()
		if used <= p || s.stats.inst.peakMemory.CompareAndSwap(p, used) {
			return
		}
	}
}

// heapObjects is the Go heap's allocated bytes (runtime.MemStats.HeapAlloc)
// read without stopping the world.
func heapObjects() int64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(sample[0].Value.Uint64())
}

// processRSS returns the resident set size of this process in bytes, from
// /proc/self/statm, or fallback where there is no /proc.
func processRSS(fallback int64) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return fallback
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return fallback
	}
	return pages * int64(os.Getpagesize())
}

// totalSystemMemory returns the machine's memory in bytes, from
// /proc/meminfo, or 0 where it is unknown (as Redis reports).
var totalSystemMemory = sync.OnceValue(func() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("MemTotal:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
})

// osName is Redis's os field, "Linux 6.1.0-18-amd64 x86_64" (uname's
// sysname, release and machine), from /proc where there is one.
var osName = sync.OnceValue(func() string {
	sys := runtime.GOOS
	if b, err := os.ReadFile("/proc/sys/kernel/ostype"); err == nil {
		sys = strings.TrimSpace(string(b))
	}
	parts := []string{sys}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, strings.TrimSpace(string(b)))
	}
	machine := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686"}[runtime.GOARCH]
	if machine == "" {
		machine = runtime.GOARCH
	}
	return strings.Join(append(parts, machine), " ")
})

// multiplexingAPI is Redis's multiplexing_api: what the Go runtime's
// network poller (and cellserver's event loops, on Linux) wait with.
func multiplexingAPI() string {
	switch runtime.GOOS {
	case "linux", "android":
		return "epoll"
	case "darwin", "ios", "freebsd", "netbsd", "openbsd", "dragonfly":
		return "kqueue"
	case "windows":
		return "iocp"
	case "solaris", "illumos":
		return "evport"
	}
	return "poll"
}

// buildID is Redis's redis_build_id: hex characters that differ between
// builds; here a digest of cellserver's version and Go's.
func buildID(version string) string {
	var h uint64 = 14695981039346656037 // FNV-1a
	for _, c := range []byte(version + " " + runtime.Version()) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 16)
}

// lruClock is Redis's lru_clock: seconds modulo 2^24.
func lruClock(now time.Time) int64 { return now.Unix() & (1<<24 - 1) }

// cpuSeconds formats a CPU time as Redis does ("%ld.%06ld").
func cpuSeconds(d time.Duration) string {
	us := d.Microseconds()
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// infoSection is one section of INFO.
type infoSection struct {
	name      string // as INFO's arguments name it, lower-case
	title     string // after "# " in the reply
	inDefault bool   // shown by INFO and INFO default, not only when named or by INFO all
	lines     func(c *infoCall) []string
}

// infoSections are INFO's sections in the order INFO replies them. Each
// section has Redis 7.0's fields in Redis's order, then cellserver's own.
// The Redis fields left out describe mechanisms cellserver does not have
// (forks, RDB, AOF rewrites, scripting, defragmentation, I/O threads):
// info_test.go lists them, with why.
var infoSections = []infoSection{
	{"server", "Server", true, (*infoCall).server},
	{"clients", "Clients", true, (*infoCall).clients},
	{"memory", "Memory", true, (*infoCall).memory},
	{"persistence", "Persistence", true, (*infoCall).persistence},
	{"stats", "Stats", true, (*infoCall).stats},
	{"replication", "Replication", true, (*infoCall).replication},
	{"cpu", "CPU", true, (*infoCall).cpu},
	{"modules", "Modules", true, (*infoCall).modules},
	{"commandstats", "Commandstats", false, (*infoCall).commandstats},
	{"limiters", "Limiters", true, (*infoCall).limiters},
	{"errorstats", "Errorstats", true, (*infoCall).errorstats},
	{"cluster", "Cluster", true, (*infoCall).cluster},
	{"migrations", "Migrations", false, (*infoCall).migrations},
	{"policies", "Policies", false, (*infoCall).policies},
	{"rls", "RLS", false, (*infoCall).rls},
	{"keyspace", "Keyspace", true, (*infoCall).keyspace},
}

// infoCall is what the sections of one INFO call share: one reading of
// the server's clock and of the connection layer's counters.
type infoCall struct {
	x   *ctx
	s   *Service
	now time.Time // on the clock started was read from
	net netStats
}

type netStats struct {
	connected, total, rejected, protoErrs, in, out int64
}

func newInfoCall(x *ctx) *infoCall {
	c := &infoCall{x: x, s: x.s, now: x.s.clock()}
	if n := x.s.net.Load(); n != nil {
		rs := n.Stats()
		c.net = netStats{rs.ConnectedClients, rs.TotalConnections, rs.RejectedConnections,
			rs.ProtocolErrors, rs.NetInputBytes, rs.NetOutputBytes}
	}
	return c
}

func (c *infoCall) server() []string {
	s := c.s
	uptime := int64(c.now.Sub(s.started).Seconds())
	hz := max(int64(time.Second/s.sweepInt), 1) // active expiry runs hz times a second
	return []string{
		"redis_version:" + s.redisVersion,
		"redis_git_sha1:00000000",
		"redis_git_dirty:0",
		"redis_build_id:" + buildID(s.version),
		"redis_mode:" + s.redisMode(),
		"os:" + osName(),
		fmt.Sprintf("arch_bits:%d", strconv.IntSize),
		"monotonic_clock:POSIX clock_gettime",
		"multiplexing_api:" + multiplexingAPI(),
		"gcc_version:0.0.0", // Redis's value when not built by GCC
		fmt.Sprintf("process_id:%d", os.Getpid()),
		"process_supervised:no",
		"run_id:" + s.runID,
		"tcp_port:" + s.setting("port"),
		fmt.Sprintf("server_time_usec:%d", s.clock().UnixMicro()),
		fmt.Sprintf("uptime_in_seconds:%d", uptime),
		fmt.Sprintf("uptime_in_days:%d", uptime/86400),
		fmt.Sprintf("hz:%d", hz),
		fmt.Sprintf("configured_hz:%d", hz),
		fmt.Sprintf("lru_clock:%d", lruClock(c.now)),
		"executable:" + executable(),
		"config_file:" + s.configFile,
		"cellserver_version:" + s.version,
		"go_version:" + runtime.Version(),
	}
}

func (c *infoCall) clients() []string {
	s := c.s
	var maxIn, maxOut int
	if n := s.net.Load(); n != nil {
		n.Range(func(conn *resp.Conn) bool {
			maxIn, maxOut = max(maxIn, conn.QueryBufLen()), max(maxOut, conn.OutLen())
			return true
		})
	}
	lq, lw := s.leaseWaitCounts()
	return []string{
		fmt.Sprintf("connected_clients:%d", c.net.connected),
		fmt.Sprintf("cluster_connections:%d", c.clusterConnections()),
		"maxclients:" + s.setting("maxclients"),
		fmt.Sprintf("client_recent_max_input_buffer:%d", maxIn),
		fmt.Sprintf("client_recent_max_output_buffer:%d", maxOut),
		fmt.Sprintf("blocked_clients:%d", s.blocked.Load()),
		fmt.Sprintf("tracking_clients:%d", s.track.clients.Load()),
		"clients_in_timeout_table:0",
		fmt.Sprintf("lease_wait_queues:%d", lq),
		fmt.Sprintf("lease_waiters:%d", lw),
	}
}

// maxmemoryPolicies names the eviction policies as the maxmemory-policy
// setting spells them.
var maxmemoryPolicies = map[keyspace.Policy]string{
	keyspace.AllKeysLRU: "allkeys-lru",
	keyspace.NoEviction: "noeviction",
	keyspace.AllKeysLFU: "allkeys-lfu",
}

func (c *infoCall) memory() []string {
	s := c.s
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mem := s.ks.Memory()
	used := int64(ms.HeapAlloc)
	s.notePeak(used)
	peak := s.stats.inst.peakMemory.Load()
	rss := processRSS(int64(ms.Sys))
	dataset := min(mem.Used, used)
	startup := s.stats.inst.startupMemory
	active := int64(ms.HeapInuse)
	resident := int64(ms.HeapSys - ms.HeapReleased)
	var clientMem int64
	if n := s.net.Load(); n != nil {
		n.Range(func(conn *resp.Conn) bool {
			clientMem += int64(conn.QueryBufLen() + conn.OutLen())
			return true
		})
	}
	return []string{
		fmt.Sprintf("used_memory:%d", used),
		"used_memory_human:" + bytesToHuman(used),
		fmt.Sprintf("used_memory_rss:%d", rss),
		"used_memory_rss_human:" + bytesToHuman(rss),
		fmt.Sprintf("used_memory_peak:%d", peak),
		"used_memory_peak_human:" + bytesToHuman(peak),
		fmt.Sprintf("used_memory_peak_perc:%.2f%%", 100*ratio(used, peak)),
		fmt.Sprintf("used_memory_overhead:%d", used-dataset),
		fmt.Sprintf("used_memory_startup:%d", startup),
		fmt.Sprintf("used_memory_dataset:%d", dataset),
		fmt.Sprintf("used_memory_dataset_perc:%.2f%%", 100*ratio(dataset, max(used-startup, 1))),
		fmt.Sprintf("allocator_allocated:%d", used),
		fmt.Sprintf("allocator_active:%d", active),
		fmt.Sprintf("allocator_resident:%d", resident),
		fmt.Sprintf("total_system_memory:%d", totalSystemMemory()),
		"total_system_memory_human:" + bytesToHuman(totalSystemMemory()),
		fmt.Sprintf("maxmemory:%d", mem.MaxMemory),
		"maxmemory_human:" + bytesToHuman(mem.MaxMemory),
		"maxmemory_policy:" + maxmemoryPolicies[mem.Policy],
		fmt.Sprintf("allocator_frag_ratio:%.2f", ratio(active, used)),
		fmt.Sprintf("allocator_frag_bytes:%d", active-used),
		fmt.Sprintf("allocator_rss_ratio:%.2f", ratio(resident, active)),
		fmt.Sprintf("allocator_rss_bytes:%d", resident-active),
		fmt.Sprintf("rss_overhead_ratio:%.2f", ratio(rss, resident)),
		fmt.Sprintf("rss_overhead_bytes:%d", rss-resident),
		fmt.Sprintf("mem_fragmentation_ratio:%.2f", ratio(rss, used)),
		fmt.Sprintf("mem_fragmentation_bytes:%d", rss-used),
		"mem_not_counted_for_evict:0",
		fmt.Sprintf("mem_replication_backlog:%d", s.repl.BacklogMemory()),
		"mem_total_replication_buffers:0",
		"mem_clients_slaves:0",
		fmt.Sprintf("mem_clients_normal:%d", clientMem),
		"mem_cluster_links:0",
		"mem_aof_buffer:0",
		"mem_allocator:go",
		fmt.Sprintf("keyspace_memory:%d", mem.Used),
		fmt.Sprintf("go_gc_cycles:%d", ms.NumGC),
		fmt.Sprintf("go_heap_live:%d", heapLive()),
		fmt.Sprintf("go_heap_goal:%d", ms.NextGC),
	}
}

func (c *infoCall) persistence() []string {
	s := c.s
	// aof_enabled as CONFIG GET appendonly: the data directory is
	// written behind every change, as an append-only file would be.
	status := "ok"
	if s.persist.writeErr != nil && s.persist.writeErr() != nil {
		status = "err"
	}
	lines := []string{"loading:0", "async_loading:0",
		fmt.Sprintf("aof_enabled:%d", map[bool]int{false: 0, true: 1}[s.persist.info != nil]),
		"aof_last_write_status:" + status}
	if s.persist.info == nil {
		return append(lines, "persistence_mode:none")
	}
	for _, l := range s.persist.info() {
		if !strings.HasPrefix(l, "loading:") {
			lines = append(lines, l)
		}
	}
	return lines
}

func (c *infoCall) stats() []string {
	s, st := c.s, c.net
	var expiredKeys = s.stats.expired.Load()
	rst := s.repl.Stats()
	trkKeys, trkItems, trkPrefixes := s.track.stats()
	psChannels, psPatterns, psShard := s.pubsub.stats()
	s.stats.inst.mu.Lock()
	ops, inKbps, outKbps := s.stats.inst.ops.rate(), s.stats.inst.in.rate()/1024, s.stats.inst.out.rate()/1024
	s.stats.inst.mu.Unlock()
	return []string{
		fmt.Sprintf("total_connections_received:%d", st.total),
		fmt.Sprintf("total_commands_processed:%d", s.stats.cmdsTotal.Load()),
		fmt.Sprintf("instantaneous_ops_per_sec:%d", int64(ops)),
		fmt.Sprintf("total_net_input_bytes:%d", st.in),
		fmt.Sprintf("total_net_output_bytes:%d", st.out),
		"total_net_repl_input_bytes:0",
		"total_net_repl_output_bytes:0",
		fmt.Sprintf("instantaneous_input_kbps:%.2f", inKbps),
		fmt.Sprintf("instantaneous_output_kbps:%.2f", outKbps),
		"instantaneous_input_repl_kbps:0.00",
		"instantaneous_output_repl_kbps:0.00",
		fmt.Sprintf("rejected_connections:%d", st.rejected),
		fmt.Sprintf("sync_full:%d", rst.SyncFull),
		fmt.Sprintf("sync_partial_ok:%d", rst.SyncPartialOK),
		fmt.Sprintf("sync_partial_err:%d", rst.SyncPartialErr),
		fmt.Sprintf("expired_keys:%d", expiredKeys),
		fmt.Sprintf("expire_cycle_cpu_milliseconds:%d", s.stats.expireNS.Load()/1e6),
		fmt.Sprintf("evicted_keys:%d", s.ks.Memory().Evicted),
		fmt.Sprintf("keyspace_hits:%d", s.stats.keyspaceHits.Load()),
		fmt.Sprintf("keyspace_misses:%d", s.stats.keyspaceMisses.Load()),
		fmt.Sprintf("pubsub_channels:%d", psChannels),
		fmt.Sprintf("pubsub_patterns:%d", psPatterns),
		fmt.Sprintf("pubsubshard_channels:%d", psShard),
		fmt.Sprintf("tracking_total_keys:%d", trkKeys),
		fmt.Sprintf("tracking_total_items:%d", trkItems),
		fmt.Sprintf("tracking_total_prefixes:%d", trkPrefixes),
		"unexpected_error_replies:0",
		fmt.Sprintf("total_error_replies:%d", s.totalErrors()),
		fmt.Sprintf("oom_refusals:%d", s.stats.oomRefusals.Load()),
		fmt.Sprintf("protocol_errors:%d", st.protoErrs),
	}
}

func (c *infoCall) replication() []string {
	s := c.s
	return s.repl.Info(replication.InfoOptions{Priority: s.repl.priority, ReadOnly: !s.repl.writable,
		MinReplicasToWrite: s.repl.minReplicas, MinReplicasMaxLag: s.repl.minLag})
}

func (c *infoCall) cpu() []string {
	user, sys, childUser, childSys := cpuTimes()
	return []string{
		"used_cpu_sys:" + cpuSeconds(sys),
		"used_cpu_user:" + cpuSeconds(user),
		"used_cpu_sys_children:" + cpuSeconds(childSys),
		"used_cpu_user_children:" + cpuSeconds(childUser),
		fmt.Sprintf("go_goroutines:%d", runtime.NumGoroutine()),
	}
}

func (c *infoCall) modules() []string {
	return []string{fmt.Sprintf("module:name=%s,ver=%d,api=1,filters=0,usedby=[],using=[],options=[]",
		cellModuleName, cellModuleVer)}
}

// commandstats lists the commands called or rejected at least once.
func (c *infoCall) commandstats() []string {
	var lines []string
	for _, sp := range c.s.specs {
		calls := sp.stats.calls.Load()
		rejected := sp.stats.rejected.Load()
		if calls == 0 && rejected == 0 {
			continue
		}
		usec := sp.stats.usec.Load() / 1000
		per := 0.0
		if calls > 0 {
			per = float64(sp.stats.usec.Load()) / 1000 / float64(calls)
		}
		lines = append(lines, fmt.Sprintf(
			"cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,failed_calls=%d",
			sp.Name, calls, usec, per, rejected, sp.stats.failed.Load()))
	}
	sort.Strings(lines)
	return lines
}

func (c *infoCall) limiters() []string {
	var lines []string
	for _, cs := range c.s.Stats().Commands {
		if cs.Limiter {
			lines = append(lines, fmt.Sprintf("limiter_%s:allowed=%d,limited=%d", cs.Name, cs.Allowed, cs.Limited))
		}
	}
	return lines
}

func (c *infoCall) errorstats() []string {
	var lines []string
	for _, e := range c.s.errorStats() {
		lines = append(lines, fmt.Sprintf("errorstat_%s:count=%d", e.code, e.count))
	}
	return lines
}

// clusterConnections is INFO's cluster_connections: the pub/sub links up
// (Redis counts its cluster bus links).
func (c *infoCall) clusterConnections() int {
	if c.s.cluster.bus == nil {
		return 0
	}
	n := 0
	for _, l := range c.s.cluster.bus.Links() {
		if l.Up {
			n++
		}
	}
	return n
}

// cluster is INFO cluster: cluster_enabled, as Redis, then in cluster
// mode cellserver's pub/sub links (cluster.Bus): how many, the messages
// other nodes forwarded here, and per link (one per other node of the
// topology) its state and the messages it forwarded and dropped.
func (c *infoCall) cluster() []string {
	cm := &c.s.cluster
	lines := []string{"cluster_enabled:" + map[bool]string{false: "0", true: "1"}[cm.state != nil]}
	if cm.state == nil || cm.bus == nil {
		return lines
	}
	links := cm.bus.Links()
	up := 0
	var fwd, dropped int64
	for _, l := range links {
		if l.Up {
			up++
		}
		fwd += l.Forwarded
		dropped += l.Dropped
	}
	lines = append(lines,
		fmt.Sprintf("cluster_pubsub_links:%d", len(links)),
		fmt.Sprintf("cluster_pubsub_links_up:%d", up),
		fmt.Sprintf("cluster_pubsub_forwarded:%d", fwd),
		fmt.Sprintf("cluster_pubsub_dropped:%d", dropped),
		fmt.Sprintf("cluster_pubsub_received:%d", cm.received.Load()))
	for i, l := range links {
		state := "down"
		if l.Up {
			state = "up"
		}
		lines = append(lines, fmt.Sprintf("cluster_pubsub_link%d:id=%s,addr=%s,state=%s,forwarded=%d,dropped=%d,queued_bytes=%d",
			i, l.ID, l.Addr, state, l.Forwarded, l.Dropped, l.QueuedBytes))
	}
	return lines
}

// migrations is cellserver's section of slot migrations (cluster mode:
// cluster/migration.go), shown when named or by INFO all.
func (c *infoCall) migrations() []string {
	st := c.s.cluster.state
	if st == nil {
		return nil
	}
	ms := st.MigrationStats()
	return []string{
		fmt.Sprintf("migrations_out:%d", ms.Out),
		fmt.Sprintf("migrations_in:%d", ms.In),
		fmt.Sprintf("migrations_finished:%d", ms.Finished),
		fmt.Sprintf("migration_keys_sent:%d", ms.KeysSent),
		fmt.Sprintf("migration_last_handover_us:%d", ms.LastPause.Microseconds()),
	}
}

func (c *infoCall) policies() []string { return c.s.policyInfo() }

func (c *infoCall) rls() []string {
	if c.s.rlsInfo == nil {
		return nil
	}
	return c.s.rlsInfo()
}

// keyspace lists the databases holding at least one key.
func (c *infoCall) keyspace() []string {
	var lines []string
	nowMS := c.x.clockMS()
	for i := 0; i < c.s.ks.NumDB(); i++ {
		ks := c.s.ks.DB(i).Stats(nowMS, c.x.locked)
		if ks.Keys == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("db%d:keys=%d,expires=%d,avg_ttl=0", i, ks.Keys, ks.Expires))
	}
	return lines
}

// heapLive returns the heap bytes the last garbage collection found live:
// unlike used_memory it excludes garbage not yet collected.
func heapLive() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}
