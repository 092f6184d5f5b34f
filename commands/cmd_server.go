package commands

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/replication"
	"github.com/cellserver/cellserver/resp"
)

// COMMAND with no subcommand: the info of every top-level command.
func cmdCommand(x *ctx) {
	names := x.s.topNames()
	x.array(len(names))
	for _, n := range names {
		x.commandInfo(x.s.table[n])
	}
}

func (s *Server) topNames() []string {
	names := make([]string, 0, len(s.table))
	for n := range s.table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func cmdCommandCount(x *ctx) { x.int(int64(len(x.s.table))) }

// COMMAND INFO [command-name ...]
func cmdCommandInfo(x *ctx) {
	if len(x.args) == 2 {
		cmdCommand(x)
		return
	}
	x.array(len(x.args) - 2)
	for _, a := range x.args[2:] {
		sp := x.s.findSpec(a)
		if sp == nil {
			x.null() // Redis 7.0 answers a null bulk string here
			continue
		}
		x.commandInfo(sp)
	}
}

// findSpec resolves "name" or "container|sub", ignoring case.
func (s *Server) findSpec(name []byte) *Spec {
	n := strings.ToLower(string(name))
	if i := strings.IndexByte(n, '|'); i >= 0 {
		parent := s.table[n[:i]]
		if parent == nil || parent.subs == nil {
			return nil
		}
		return parent.subs[n[i+1:]]
	}
	return s.table[n]
}

// commandInfo writes Redis 7's 10-element COMMAND INFO entry.
func (x *ctx) commandInfo(sp *Spec) {
	x.array(10)
	x.bulkStr(sp.Name)
	x.int(int64(sp.Arity))
	var flags []string
	for _, f := range flagNames {
		if sp.Flags&f.f != 0 {
			flags = append(flags, f.name)
		}
	}
	x.setLen(len(flags))
	for _, f := range flags {
		x.status(f)
	}
	x.int(int64(sp.FirstKey))
	x.int(int64(sp.LastKey))
	x.int(int64(sp.Step))
	x.setLen(len(sp.ACL))
	for _, c := range sp.ACL {
		x.status("@" + c)
	}
	x.setLen(0) // tips
	x.keySpecs(sp)
	if len(sp.Subs) == 0 {
		x.setLen(0) // as Redis: an empty set, subcommands an array
		return
	}
	x.array(len(sp.Subs))
	for _, sub := range sp.Subs {
		x.commandInfo(sub)
	}
}

// keySpecs writes the key specs derived from the legacy key positions: one
// spec of type index/range, as Redis reports for a command registered with
// firstkey/lastkey/keystep.
func (x *ctx) keySpecs(sp *Spec) {
	if sp.FirstKey == 0 {
		x.setLen(0)
		return
	}
	x.setLen(1)
	x.mapLen(3)
	x.bulkStr("flags")
	x.setLen(len(sp.KeyFlags))
	for _, f := range sp.KeyFlags {
		x.status(f)
	}
	x.bulkStr("begin_search")
	x.mapLen(2)
	x.bulkStr("type")
	x.bulkStr("index")
	x.bulkStr("spec")
	x.mapLen(1)
	x.bulkStr("index")
	x.int(int64(sp.FirstKey))
	x.bulkStr("find_keys")
	x.mapLen(2)
	x.bulkStr("type")
	x.bulkStr("range")
	x.bulkStr("spec")
	x.mapLen(3)
	x.bulkStr("lastkey")
	last := sp.LastKey
	if last > 0 {
		last -= sp.FirstKey
	}
	x.int(int64(last))
	x.bulkStr("keystep")
	x.int(int64(sp.Step))
	x.bulkStr("limit")
	x.int(0)
}

// COMMAND DOCS [command-name ...]
func cmdCommandDocs(x *ctx) {
	var specs []*Spec
	if len(x.args) == 2 {
		for _, n := range x.s.topNames() {
			specs = append(specs, x.s.table[n])
		}
	} else {
		for _, a := range x.args[2:] {
			if sp := x.s.findSpec(a); sp != nil {
				specs = append(specs, sp)
			}
		}
	}
	x.mapLen(len(specs))
	for _, sp := range specs {
		x.bulkStr(sp.Name)
		x.commandDocs(sp)
	}
}

func (x *ctx) commandDocs(sp *Spec) {
	n := 1 // group is always there
	for _, present := range []bool{sp.Summary != "", sp.Since != "", sp.Complex != "", sp.Module != "", len(sp.Args) > 0, len(sp.Subs) > 0} {
		if present {
			n++
		}
	}
	x.mapLen(n)
	if sp.Summary != "" {
		x.bulkStr("summary")
		x.bulkStr(sp.Summary)
	}
	if sp.Since != "" {
		x.bulkStr("since")
		x.bulkStr(sp.Since)
	}
	x.bulkStr("group")
	x.bulkStr(sp.Group)
	if sp.Complex != "" {
		x.bulkStr("complexity")
		x.bulkStr(sp.Complex)
	}
	if sp.Module != "" {
		x.bulkStr("module")
		x.bulkStr(sp.Module)
	}
	if len(sp.Args) > 0 {
		x.bulkStr("arguments")
		x.argDocs(sp.Args)
	}
	if len(sp.Subs) > 0 {
		x.bulkStr("subcommands")
		x.mapLen(len(sp.Subs))
		for _, sub := range sp.Subs {
			x.bulkStr(sub.Name)
			x.commandDocs(sub)
		}
	}
}

func (x *ctx) argDocs(args []Arg) {
	x.array(len(args))
	for _, a := range args {
		n := 2
		var flags []string
		if a.Optional {
			flags = append(flags, "optional")
		}
		if a.Multiple {
			flags = append(flags, "multiple")
		}
		if a.Type == "key" {
			n++
		}
		if a.Token != "" {
			n++
		}
		if len(flags) > 0 {
			n++
		}
		if len(a.Args) > 0 {
			n++
		}
		x.mapLen(n)
		x.bulkStr("name")
		x.bulkStr(a.Name)
		x.bulkStr("type")
		x.bulkStr(a.Type)
		if a.Type == "key" {
			x.bulkStr("key_spec_index")
			x.int(int64(a.KeySpec))
		}
		if a.Token != "" {
			x.bulkStr("token")
			x.bulkStr(a.Token)
		}
		if len(flags) > 0 {
			x.bulkStr("flags")
			x.setLen(len(flags))
			for _, f := range flags {
				x.status(f)
			}
		}
		if len(a.Args) > 0 {
			x.bulkStr("arguments")
			x.argDocs(a.Args)
		}
	}
}

// COMMAND GETKEYS command [arg ...]
func cmdCommandGetKeys(x *ctx) {
	args := x.args[2:]
	// As Redis's lookupCommand: a name, then a subcommand word; no "a|b".
	sp := x.s.table[string(lowerInto(x.cl.lower[:0], args[0]))]
	if sp != nil && sp.subs != nil && len(args) >= 2 {
		sp = sp.subs[string(lowerInto(x.cl.lower[:0], args[1]))]
	}
	switch {
	case sp == nil:
		x.errorReply(msgNoSuchCommand)
		return
	case sp.FirstKey == 0 && sp.Keys == nil:
		x.errorReply(msgNoKeyArgs)
		return
	case !sp.arityOK(len(args)):
		x.errorReply(msgGetKeysArity)
		return
	}
	pos := sp.keyPositions(x.cl.pos[:0], args)
	x.cl.pos = pos
	x.cl.bigKeys = true
	if len(pos) == 0 {
		x.errorReply(msgInvalidArgs)
		return
	}
	x.array(len(pos))
	for _, p := range pos {
		x.bulk(args[p])
	}
}

// COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]
func cmdCommandList(x *ctx) {
	var filter func(sp *Spec) bool
	switch len(x.args) {
	case 2:
	case 5:
		if !eqFold(x.args[2], "filterby") {
			x.errorReply(msgSyntax)
			return
		}
		val := x.args[4]
		switch {
		case eqFold(x.args[3], "module"):
			filter = func(sp *Spec) bool { return sp.Module != "" && strings.EqualFold(sp.Module, string(val)) }
		case eqFold(x.args[3], "aclcat"):
			filter = func(sp *Spec) bool {
				for _, c := range sp.ACL {
					if strings.EqualFold(c, string(val)) {
						return true
					}
				}
				return false
			}
		case eqFold(x.args[3], "pattern"):
			filter = func(sp *Spec) bool { return globMatch(val, []byte(sp.Name), true) }
		default:
			x.errorReply(msgSyntax)
			return
		}
	default:
		x.errorReply(msgSyntax)
		return
	}
	var names []string
	for _, sp := range x.s.specs {
		if filter == nil || filter(sp) {
			names = append(names, sp.Name)
		}
	}
	sort.Strings(names)
	x.array(len(names))
	for _, n := range names {
		x.bulkStr(n)
	}
}

// HELP subcommands of containers.
func helpReply(x *ctx, lines ...string) {
	x.array(len(lines))
	for _, l := range lines {
		x.status(l)
	}
}

func cmdCommandHelp(x *ctx) {
	helpReply(x,
		"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"(no subcommand)",
		"    Return details about all commands.",
		"COUNT",
		"    Return the total number of commands in this server.",
		"LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
		"    Return a list of all commands in this server.",
		"INFO [<command-name> ...]",
		"    Return details about the given commands, or all commands if none is given.",
		"GETKEYS <full-command>",
		"    Return the keys from a full command.",
		"DOCS [<command-name> ...]",
		"    Return documentation details about the given commands, or all commands if none is given.",
		"HELP",
		"    Prints this help.")
}

// CONFIG GET parameter [parameter ...]: a read-only view of the effective
// configuration, as a flat list of name/value pairs. As Redis 7.0's
// configGetCommand: a parameter without glob characters ([*?) is looked up
// ignoring case and echoed as the caller typed it (CONFIG GET MAXCLIENTS
// answers "MAXCLIENTS"); a pattern matches ignoring case and answers the
// canonical lower-case names; each setting appears once. Redis lists the
// matches in its hash table's order, which changes with every process;
// cellserver lists them in argument order, a pattern's in table order.
func cmdConfigGet(x *ctx) {
	var out []Setting
	seen := map[string]bool{}
	for _, pat := range x.args[2:] {
		if !bytes.ContainsAny(pat, "[*?") {
			for _, st := range x.s.settings {
				if !seen[st.Name] && strings.EqualFold(st.Name, string(pat)) {
					seen[st.Name] = true
					out = append(out, Setting{Name: string(pat), Value: st.Value})
				}
			}
			continue
		}
		for _, st := range x.s.settings {
			if !seen[st.Name] && globMatch(pat, []byte(st.Name), true) {
				seen[st.Name] = true
				out = append(out, st)
			}
		}
	}
	x.mapLen(len(out))
	for _, st := range out {
		x.bulkStr(st.Name)
		x.bulkStr(st.Value)
	}
}

func cmdConfigSet(x *ctx) { x.errorReply(msgConfigSetRO) }

func cmdConfigResetStat(x *ctx) {
	for _, sp := range x.s.specs {
		sp.stats.reset()
	}
	x.s.errMu.Lock()
	x.s.errStats = make(map[string]int64)
	x.s.errMu.Unlock()
	x.ok()
}

// CONFIG REWRITE persists the settings that changed at run time (the
// replicaof that Sentinel's failover transaction sets with SLAVEOF) to the
// config file, as Redis does. Without a config file it answers Redis's
// error; Sentinel ignores the reply either way (it sends CONFIG REWRITE
// inside MULTI, where it must only be queued).
func cmdConfigRewrite(x *ctx) {
	if x.s.rewrite == nil {
		x.errorReply(msgConfigNoFile)
		return
	}
	if err := x.s.rewrite(); err != nil {
		x.s.log.Warn("CONFIG REWRITE failed", "err", err)
		x.errorReply(fmt.Sprintf(msgConfigRewrite, err))
		return
	}
	x.s.log.Info("CONFIG REWRITE executed with success")
	x.ok()
}

func cmdConfigHelp(x *ctx) {
	helpReply(x,
		"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GET <pattern>",
		"    Return parameters matching the glob-like <pattern> and their values.",
		"SET <directive> <value>",
		"    Not supported: the configuration is read-only at run time.",
		"RESETSTAT",
		"    Reset statistics reported by the INFO command.",
		"REWRITE",
		"    Rewrite the configuration file.",
		"HELP",
		"    Prints this help.")
}

func cmdClientHelp(x *ctx) {
	helpReply(x,
		"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GETNAME",
		"    Return the name of the current connection.",
		"ID",
		"    Return the ID of the current connection.",
		"INFO",
		"    Return information about the current client connection.",
		"KILL <ip:port>",
		"    Kill connection made from <ip:port>.",
		"KILL <option> <value> [<option> <value> [...]]",
		"    Kill connections. Options are:",
		"    * ADDR (<ip:port>|<unixsocket>:0)",
		"      Kill connections made from the specified address",
		"    * LADDR (<ip:port>|<unixsocket>:0)",
		"      Kill connections made to specified local address",
		"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
		"      Kill connections by type.",
		"    * USER <username>",
		"      Kill connections authenticated by <username>.",
		"    * SKIPME (YES|NO)",
		"      Skip killing current connection (default: yes).",
		"LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB)] [ID <id> [<id> ...]]",
		"    Return information about client connections.",
		"SETINFO <option> <value>",
		"    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
		"SETNAME <name>",
		"    Assign the name <name> to the current connection.",
		"HELP",
		"    Prints this help.")
}

// INFO [section [section ...]]
func cmdInfo(x *ctx) {
	want := map[string]bool{}
	for _, a := range x.args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := want["all"] || want["everything"]
	deflt := len(want) == 0 || want["default"] || all
	show := func(name string, inDefault bool) bool {
		return want[name] || (inDefault && deflt) || (!inDefault && all)
	}
	var b strings.Builder
	section := func(title string, lines ...string) {
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + title + "\r\n")
		for _, l := range lines {
			b.WriteString(l + "\r\n")
		}
	}
	s := x.s
	now := s.clock() // the clock started was read from
	uptime := int64(now.Sub(s.started).Seconds())
	var st netStats
	if n := s.net.Load(); n != nil {
		rs := n.Stats()
		st = netStats{rs.ConnectedClients, rs.TotalConnections, rs.RejectedConnections, rs.ProtocolErrors, rs.NetInputBytes, rs.NetOutputBytes}
	}
	// Each section has Redis 7.0's fields in Redis's order, then
	// cellserver's own. The Redis fields left out describe mechanisms
	// cellserver does not have (forks, RDB, AOF rewrites, scripting,
	// defragmentation, I/O threads): info_test.go lists them, with why.
	if show("server", true) {
		hz := max(int64(time.Second/s.sweepInt), 1) // active expiry runs hz times a second
		section("Server",
			"redis_version:"+redisCompatVers,
			"redis_git_sha1:00000000",
			"redis_git_dirty:0",
			"redis_build_id:"+buildID(s.version),
			"redis_mode:"+s.redisMode(),
			"os:"+osName(),
			fmt.Sprintf("arch_bits:%d", strconv.IntSize),
			"monotonic_clock:POSIX clock_gettime",
			"multiplexing_api:"+multiplexingAPI(),
			"gcc_version:0.0.0", // Redis's value when not built by GCC
			fmt.Sprintf("process_id:%d", os.Getpid()),
			"process_supervised:no",
			"run_id:"+s.runID,
			"tcp_port:"+s.setting("port"),
			fmt.Sprintf("server_time_usec:%d", s.clock().UnixMicro()),
			fmt.Sprintf("uptime_in_seconds:%d", uptime),
			fmt.Sprintf("uptime_in_days:%d", uptime/86400),
			fmt.Sprintf("hz:%d", hz),
			fmt.Sprintf("configured_hz:%d", hz),
			fmt.Sprintf("lru_clock:%d", lruClock(now)),
			"executable:"+executable(),
			"config_file:"+s.configFile,
			"cellserver_version:"+s.version,
			"go_version:"+runtime.Version(),
		)
	}
	if show("clients", true) {
		var maxIn, maxOut int
		if n := s.net.Load(); n != nil {
			n.Range(func(c *resp.Conn) bool {
				maxIn, maxOut = max(maxIn, c.QueryBufLen()), max(maxOut, c.OutLen())
				return true
			})
		}
		lq, lw := s.leaseWaitCounts()
		section("Clients",
			fmt.Sprintf("connected_clients:%d", st.connected),
			"cluster_connections:0",
			"maxclients:"+s.setting("maxclients"),
			fmt.Sprintf("client_recent_max_input_buffer:%d", maxIn),
			fmt.Sprintf("client_recent_max_output_buffer:%d", maxOut),
			"blocked_clients:0",
			fmt.Sprintf("tracking_clients:%d", s.track.clients.Load()),
			"clients_in_timeout_table:0",
			fmt.Sprintf("lease_wait_queues:%d", lq),
			fmt.Sprintf("lease_waiters:%d", lw),
		)
	}
	if show("memory", true) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mem := s.ks.Memory()
		used := int64(ms.HeapAlloc)
		s.notePeak(used)
		peak := s.inst.peakMemory.Load()
		rss := processRSS(int64(ms.Sys))
		dataset := min(mem.Used, used)
		startup := s.inst.startupMemory
		active := int64(ms.HeapInuse)
		resident := int64(ms.HeapSys - ms.HeapReleased)
		var clientMem int64
		if n := s.net.Load(); n != nil {
			n.Range(func(c *resp.Conn) bool {
				clientMem += int64(c.QueryBufLen() + c.OutLen())
				return true
			})
		}
		section("Memory",
			fmt.Sprintf("used_memory:%d", used),
			"used_memory_human:"+bytesToHuman(used),
			fmt.Sprintf("used_memory_rss:%d", rss),
			"used_memory_rss_human:"+bytesToHuman(rss),
			fmt.Sprintf("used_memory_peak:%d", peak),
			"used_memory_peak_human:"+bytesToHuman(peak),
			fmt.Sprintf("used_memory_peak_perc:%.2f%%", 100*ratio(used, peak)),
			fmt.Sprintf("used_memory_overhead:%d", used-dataset),
			fmt.Sprintf("used_memory_startup:%d", startup),
			fmt.Sprintf("used_memory_dataset:%d", dataset),
			fmt.Sprintf("used_memory_dataset_perc:%.2f%%", 100*ratio(dataset, max(used-startup, 1))),
			fmt.Sprintf("allocator_allocated:%d", used),
			fmt.Sprintf("allocator_active:%d", active),
			fmt.Sprintf("allocator_resident:%d", resident),
			fmt.Sprintf("total_system_memory:%d", totalSystemMemory()),
			"total_system_memory_human:"+bytesToHuman(totalSystemMemory()),
			fmt.Sprintf("maxmemory:%d", mem.MaxMemory),
			"maxmemory_human:"+bytesToHuman(mem.MaxMemory),
			"maxmemory_policy:"+map[keyspace.Policy]string{keyspace.AllKeysLRU: "allkeys-lru", keyspace.NoEviction: "noeviction"}[mem.Policy],
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
		)
	}
	if show("persistence", true) {
		// aof_enabled as CONFIG GET appendonly: the data directory is
		// written behind every change, as an append-only file would be.
		status := "ok"
		if s.writeErr != nil && s.writeErr() != nil {
			status = "err"
		}
		lines := []string{"loading:0", "async_loading:0",
			fmt.Sprintf("aof_enabled:%d", map[bool]int{false: 0, true: 1}[s.persistInfo != nil]),
			"aof_last_write_status:" + status}
		if s.persistInfo != nil {
			for _, l := range s.persistInfo() {
				if !strings.HasPrefix(l, "loading:") {
					lines = append(lines, l)
				}
			}
		} else {
			lines = append(lines, "persistence_mode:none")
		}
		section("Persistence", lines...)
	}
	if show("stats", true) {
		var expiredKeys = s.expired.Load()
		rst := s.repl.Stats()
		trkKeys, trkItems, trkPrefixes := s.track.stats()
		psChannels, psPatterns := s.pubsub.stats()
		s.inst.mu.Lock()
		ops, inKbps, outKbps := s.inst.ops.rate(), s.inst.in.rate()/1024, s.inst.out.rate()/1024
		s.inst.mu.Unlock()
		section("Stats",
			fmt.Sprintf("total_connections_received:%d", st.total),
			fmt.Sprintf("total_commands_processed:%d", s.cmdsTotal.Load()),
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
			fmt.Sprintf("expire_cycle_cpu_milliseconds:%d", s.expireNS.Load()/1e6),
			fmt.Sprintf("evicted_keys:%d", s.ks.Memory().Evicted),
			fmt.Sprintf("keyspace_hits:%d", s.keyspaceHits.Load()),
			fmt.Sprintf("keyspace_misses:%d", s.keyspaceMisses.Load()),
			fmt.Sprintf("pubsub_channels:%d", psChannels),
			fmt.Sprintf("pubsub_patterns:%d", psPatterns),
			"pubsubshard_channels:0",
			fmt.Sprintf("tracking_total_keys:%d", trkKeys),
			fmt.Sprintf("tracking_total_items:%d", trkItems),
			fmt.Sprintf("tracking_total_prefixes:%d", trkPrefixes),
			"unexpected_error_replies:0",
			fmt.Sprintf("total_error_replies:%d", s.totalErrors()),
			fmt.Sprintf("oom_refusals:%d", s.oomRefusals.Load()),
			fmt.Sprintf("protocol_errors:%d", st.protoErrs),
		)
	}
	if show("replication", true) {
		section("Replication", s.repl.Info(replication.InfoOptions{Priority: s.replPriority, ReadOnly: !s.replicaWritable,
			MinReplicasToWrite: s.minReplicas, MinReplicasMaxLag: s.minReplicasLag})...)
	}
	if show("cpu", true) {
		user, sys, childUser, childSys := cpuTimes()
		section("CPU",
			"used_cpu_sys:"+cpuSeconds(sys),
			"used_cpu_user:"+cpuSeconds(user),
			"used_cpu_sys_children:"+cpuSeconds(childSys),
			"used_cpu_user_children:"+cpuSeconds(childUser),
			fmt.Sprintf("go_goroutines:%d", runtime.NumGoroutine()))
	}
	if show("modules", true) {
		section("Modules", fmt.Sprintf("module:name=%s,ver=%d,api=1,filters=0,usedby=[],using=[],options=[]", cellModuleName, cellModuleVer))
	}
	if show("commandstats", false) {
		var lines []string
		for _, sp := range s.specs {
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
			lines = append(lines, fmt.Sprintf("cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,failed_calls=%d",
				sp.Name, calls, usec, per, rejected, sp.stats.failed.Load()))
		}
		sort.Strings(lines)
		section("Commandstats", lines...)
	}
	if show("limiters", true) {
		var lines []string
		for _, cs := range s.Stats().Commands {
			if cs.Limiter {
				lines = append(lines, fmt.Sprintf("limiter_%s:allowed=%d,limited=%d", cs.Name, cs.Allowed, cs.Limited))
			}
		}
		section("Limiters", lines...)
	}
	if show("errorstats", true) {
		var lines []string
		for _, e := range s.errorStats() {
			lines = append(lines, fmt.Sprintf("errorstat_%s:count=%d", e.code, e.count))
		}
		section("Errorstats", lines...)
	}
	if show("cluster", true) {
		section("Cluster", "cluster_enabled:"+map[bool]string{false: "0", true: "1"}[s.cluster != nil])
	}
	if show("policies", false) {
		section("Policies", s.policyInfo()...)
	}
	if show("rls", false) {
		var lines []string
		if s.rlsInfo != nil {
			lines = s.rlsInfo()
		}
		section("RLS", lines...)
	}
	if show("keyspace", true) {
		var lines []string
		nowMS := x.clockMS()
		for i := 0; i < s.ks.NumDB(); i++ {
			ks := s.ks.DB(i).Stats(nowMS, x.locked)
			if ks.Keys == 0 {
				continue
			}
			lines = append(lines, fmt.Sprintf("db%d:keys=%d,expires=%d,avg_ttl=0", i, ks.Keys, ks.Expires))
		}
		section("Keyspace", lines...)
	}
	x.verbatim(b.String())
}

type netStats struct {
	connected, total, rejected, protoErrs, in, out int64
}

func (s *Server) totalErrors() int64 {
	var n int64
	for _, e := range s.errorStats() {
		n += e.count
	}
	return n
}

func (s *Server) setting(name string) string {
	for _, st := range s.settings {
		if st.Name == name {
			return st.Value
		}
	}
	return ""
}

func executable() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	return p
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
