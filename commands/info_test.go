package commands_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
)

// infoSection is one "# Title" section of an INFO reply: its fields in
// order and their values.
type infoSection struct {
	fields []string
	values map[string]string
}

// parseInfo splits an INFO reply into sections by title. Lines starting
// with "##" (notes in testdata) are skipped.
func parseInfo(t *testing.T, text string) (map[string]*infoSection, []string) {
	t.Helper()
	secs := map[string]*infoSection{}
	var order []string
	var cur *infoSection
	for _, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "##"):
		case strings.HasPrefix(line, "# "):
			title := line[2:]
			cur = &infoSection{values: map[string]string{}}
			secs[title] = cur
			order = append(order, title)
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok || cur == nil {
				t.Fatalf("INFO line %q is not field:value inside a section", line)
			}
			cur.fields = append(cur.fields, k)
			cur.values[k] = v
		}
	}
	return secs, order
}

// Sections whose lines are one per item (a command, an error code, a
// database, a module), not fixed fields.
var infoItemSections = map[string]bool{"Modules": true, "Commandstats": true, "Errorstats": true, "Latencystats": true, "Keyspace": true}

// infoNoMeaning lists the Redis 7.0 INFO fields and sections cellserver
// leaves out, because what they describe does not exist in cellserver.
// Every other field of Redis's INFO must be there, with a value of the
// same shape.
var infoNoMeaning = map[string]string{
	// Redis's C build: cellserver is Go (go_version is in INFO server).
	"atomicvar_api": "C atomics of the Redis build",
	// Threaded I/O (io-threads): cellserver serves clients from event
	// loops or goroutines (CONFIG GET event-loops) and counts no I/O
	// thread work.
	"io_threads_active":            "no io-threads",
	"io_threaded_reads_processed":  "no io-threads",
	"io_threaded_writes_processed": "no io-threads",
	// The connection layer counts bytes, not read and write calls, nor
	// the reply buffer's resizes.
	"total_reads_processed":  "not counted by the connection layer",
	"total_writes_processed": "not counted by the connection layer",
	"reply_buffer_shrinks":   "not counted by the connection layer",
	"reply_buffer_expands":   "not counted by the connection layer",
	// Scripting: cellserver has no EVAL and no FUNCTION.
	"used_memory_lua":            "no scripting",
	"used_memory_vm_eval":        "no scripting",
	"used_memory_lua_human":      "no scripting",
	"used_memory_scripts_eval":   "no scripting",
	"number_of_cached_scripts":   "no scripting",
	"number_of_functions":        "no scripting",
	"number_of_libraries":        "no scripting",
	"used_memory_vm_functions":   "no scripting",
	"used_memory_vm_total":       "no scripting",
	"used_memory_vm_total_human": "no scripting",
	"used_memory_functions":      "no scripting",
	"used_memory_scripts":        "no scripting",
	"used_memory_scripts_human":  "no scripting",
	// Active defragmentation and lazy freeing: Go's garbage collector
	// frees and compacts memory.
	"active_defrag_running":      "no active defrag",
	"active_defrag_hits":         "no active defrag",
	"active_defrag_misses":       "no active defrag",
	"active_defrag_key_hits":     "no active defrag",
	"active_defrag_key_misses":   "no active defrag",
	"total_active_defrag_time":   "no active defrag",
	"current_active_defrag_time": "no active defrag",
	"lazyfree_pending_objects":   "no lazy free",
	"lazyfreed_objects":          "no lazy free",
	// Forks: cellserver never forks (no BGSAVE, no BGREWRITEAOF).
	"current_cow_peak":            "never forks",
	"current_cow_size":            "never forks",
	"current_cow_size_age":        "never forks",
	"current_fork_perc":           "never forks",
	"current_save_keys_processed": "never forks",
	"current_save_keys_total":     "never forks",
	"module_fork_in_progress":     "never forks",
	"module_fork_last_cow_size":   "never forks",
	"latest_fork_usec":            "never forks",
	"total_forks":                 "never forks",
	"aof_last_cow_size":           "never forks",
	"rdb_last_cow_size":           "never forks",
	// RDB snapshots: cellserver writes none. Its data directory is written
	// behind every change (aof_enabled, pending_changes, last_sync_time,
	// keys_loaded); an rdb_last_save_time would set off "no save for N
	// hours" alerts for a server that never saves that way.
	"rdb_changes_since_last_save": "no RDB",
	"rdb_bgsave_in_progress":      "no RDB",
	"rdb_last_save_time":          "no RDB",
	"rdb_last_bgsave_status":      "no RDB",
	"rdb_last_bgsave_time_sec":    "no RDB",
	"rdb_current_bgsave_time_sec": "no RDB",
	"rdb_saves":                   "no RDB",
	"rdb_last_load_keys_expired":  "no RDB (keys_loaded, expired_dropped_at_load with --data-dir)",
	"rdb_last_load_keys_loaded":   "no RDB (keys_loaded, expired_dropped_at_load with --data-dir)",
	// AOF rewrites: Pebble compacts its files itself.
	"aof_rewrite_in_progress":           "no AOF rewrite",
	"aof_rewrite_scheduled":             "no AOF rewrite",
	"aof_last_rewrite_time_sec":         "no AOF rewrite",
	"aof_current_rewrite_time_sec":      "no AOF rewrite",
	"aof_last_bgrewrite_status":         "no AOF rewrite",
	"aof_rewrites":                      "no AOF rewrite",
	"aof_rewrites_consecutive_failures": "no AOF rewrite",
	// Active expiry: the sweep neither estimates the share of stale keys
	// nor stops on a time budget (it is bounded by keys per round).
	"expired_stale_perc":             "no estimate of stale keys",
	"expired_time_cap_reached_count": "the sweep has no time cap",
	// Eviction and client eviction timing (maxmemory-clients, and the time
	// spent over maxmemory) are not tracked; evicted_keys is.
	"evicted_clients":                "no maxmemory-clients",
	"total_eviction_exceeded_time":   "not tracked",
	"current_eviction_exceeded_time": "not tracked",
	// Commands cellserver does not have: MIGRATE, RESTORE, and writable
	// replicas.
	"migrate_cached_sockets":     "no MIGRATE",
	"dump_payload_sanitizations": "no RESTORE",
	"slave_expires_tracked_keys": "no replicas",
	// Goroutines move between threads: there is no main thread.
	"used_cpu_sys_main_thread":  "no main thread",
	"used_cpu_user_main_thread": "no main thread",
	// Sections.
	"# Latencystats": "per-command latency is the histogram of the metrics endpoint (cellserver_command_duration_seconds)",
}

// valueShape classifies an INFO value the way it is formatted: integer,
// float with its number of decimals, percentage, human-readable bytes, 40
// hex characters, or any other string.
func valueShape(v string) string {
	for _, s := range []struct {
		name string
		re   *regexp.Regexp
	}{
		{"human", regexp.MustCompile(`^(\d+B|\d+\.\d\d[KMGTPE])$`)},
		{"percent", regexp.MustCompile(`^\d+\.\d\d%$`)},
		{"hex40", regexp.MustCompile(`^[0-9a-f]{40}$`)},
		{"int", regexp.MustCompile(`^-?\d+$`)},
	} {
		if s.re.MatchString(v) {
			return s.name
		}
	}
	if m := regexp.MustCompile(`^-?\d+\.(\d+)$`).FindStringSubmatch(v); m != nil {
		return "float" + strings.Repeat("0", len(m[1]))
	}
	return "string"
}

func info(t *testing.T, addr string, args ...string) string {
	t.Helper()
	c := resptest.MustDial(t, addr)
	v := c.MustDo(t, append([]string{"INFO"}, args...)...)
	if v.Kind != '$' {
		t.Fatalf("INFO %v: %v", args, v)
	}
	return v.Str
}

// TestInfoRedisFields compares INFO everything, section by section, with
// the INFO recorded from a real Redis 7.0.15: every Redis field not in
// infoNoMeaning is there, in Redis's order, with a value of the same
// shape; cellserver's own fields may follow.
func TestInfoRedisFields(t *testing.T) {
	b, err := os.ReadFile("testdata/redis70_info.info")
	if err != nil {
		t.Fatal(err)
	}
	redis, redisOrder := parseInfo(t, string(b))
	known := map[string]bool{}
	for title, sec := range redis {
		known["# "+title] = true
		for _, f := range sec.fields {
			known[f] = true
		}
	}
	for f := range infoNoMeaning {
		if !known[f] {
			t.Errorf("infoNoMeaning lists %q, which Redis 7.0's INFO does not have", f)
		}
	}
	for _, cfg := range []struct {
		name string
		cfg  server.Config
	}{
		{"memory", server.Config{}},
		{"data-dir", server.Config{DataDir: t.TempDir(), OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{})}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			_, addr := servertest.Start(t, cfg.cfg)
			cell, cellOrder := parseInfo(t, info(t, addr, "everything"))
			checked := 0
			for _, title := range redisOrder {
				want, got := redis[title], cell[title]
				_, omitted := infoNoMeaning["# "+title]
				switch {
				case got == nil && !omitted:
					t.Errorf("section %s is missing", title)
					continue
				case got != nil && omitted:
					t.Errorf("section %s is there: take it off infoNoMeaning", title)
				}
				if got == nil || infoItemSections[title] {
					continue
				}
				pos := -1
				for _, f := range want.fields {
					_, omitted := infoNoMeaning[f]
					gv, ok := got.values[f]
					switch {
					case !ok && !omitted:
						t.Errorf("%s: field %s is missing (Redis: %s:%s)", title, f, f, want.values[f])
						continue
					case ok && omitted:
						t.Errorf("%s: field %s is there: take it off infoNoMeaning", title, f)
					case !ok:
						continue
					}
					checked++
					if ws, gs := valueShape(want.values[f]), valueShape(gv); ws != gs {
						t.Errorf("%s: %s:%s is a %s, Redis sends a %s (%s)", title, f, gv, gs, ws, want.values[f])
					}
					i := slices.Index(got.fields, f)
					if i < pos {
						t.Errorf("%s: field %s comes before a field Redis lists before it", title, f)
					}
					pos = max(pos, i)
				}
			}
			if cfg.cfg.DataDir != "" {
				// With AOF on, Redis adds aof_current_size (and fields
				// about rewrites and its AOF buffer, left out here).
				p := cell["Persistence"].values
				if p["aof_enabled"] != "1" || valueShape(p["aof_current_size"]) != "int" || p["aof_current_size"] != p["disk_usage_bytes"] {
					t.Errorf("with --data-dir: aof_enabled:%s aof_current_size:%s disk_usage_bytes:%s, want 1 and the data directory's size",
						p["aof_enabled"], p["aof_current_size"], p["disk_usage_bytes"])
				}
			}
			if p := cell["Persistence"].values; cfg.cfg.DataDir == "" && p["aof_enabled"] != "0" {
				t.Errorf("in memory: aof_enabled:%s, want 0", p["aof_enabled"])
			}
			t.Logf("%d Redis fields checked; %d left out as meaningless here; sections %v", checked, len(infoNoMeaning), cellOrder)
		})
	}
}

// TestInfoRunID: run_id is 40 hex characters, the same for the life of a
// server, different for another one.
func TestInfoRunID(t *testing.T) {
	runID := func(addr string) string {
		secs, _ := parseInfo(t, info(t, addr, "server"))
		return secs["Server"].values["run_id"]
	}
	srv, a := servertest.Start(t, server.Config{})
	_, b := servertest.Start(t, server.Config{})
	first := runID(a)
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(first) {
		t.Fatalf("run_id %q: want 40 hex characters", first)
	}
	if again := runID(a); again != first {
		t.Errorf("run_id changed from %s to %s", first, again)
	}
	if got := srv.Commands().RunID(); got != first {
		t.Errorf("Commands().RunID() = %s, INFO says %s", got, first)
	}
	if other := runID(b); other == first {
		t.Errorf("two servers share run_id %s", first)
	}
}

// TestInfoUptimeFollowsTheClock: uptime is measured on the server's clock,
// the one its start was read from (an injected clock in tests).
func TestInfoUptimeFollowsTheClock(t *testing.T) {
	clk := servertest.NewClock(time.Unix(1_700_000_000, 0))
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	clk.Advance(49*time.Hour + 30*time.Second)
	secs, _ := parseInfo(t, info(t, addr, "server"))
	v := secs["Server"].values
	if v["uptime_in_seconds"] != "176430" || v["uptime_in_days"] != "2" {
		t.Fatalf("uptime_in_seconds %s, uptime_in_days %s; want 176430 and 2", v["uptime_in_seconds"], v["uptime_in_days"])
	}
}

// TestInfoKeyspaceHits: read commands count keyspace_hits and
// keyspace_misses as Redis's lookupKeyRead does; limiter calls, which
// redis-cell makes on a key opened for writing, count neither.
func TestInfoKeyspaceHits(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	c := resptest.MustDial(t, addr)
	stats := func() (string, string) {
		secs, _ := parseInfo(t, info(t, addr, "stats"))
		return secs["Stats"].values["keyspace_hits"], secs["Stats"].values["keyspace_misses"]
	}
	if h, m := stats(); h != "0" || m != "0" {
		t.Fatalf("fresh server: hits %s misses %s, want 0 0", h, m)
	}
	c.MustDo(t, "SET", "k", "v")
	c.MustDo(t, "CL.THROTTLE", "t", "1", "1", "1")
	for _, cmd := range [][]string{{"GET", "k"}, {"GET", "nokey"}, {"EXISTS", "k", "nokey"}, {"TYPE", "k"}, {"TTL", "nokey"}, {"CL.PEEK", "t", "1", "1", "1"}, {"CL.INFO", "nokey"}, {"STRLEN", "k"}, {"STRLEN", "nokey"}} {
		c.MustDo(t, cmd...)
	}
	// Hits: GET k, EXISTS k, TYPE k, CL.PEEK t, STRLEN k. Misses: GET
	// nokey, EXISTS nokey, TTL nokey, CL.INFO nokey, STRLEN nokey.
	if h, m := stats(); h != "5" || m != "5" {
		t.Errorf("hits %s misses %s, want 5 5", h, m)
	}
}

// TestInfoConfigFile: config_file is the configuration file's absolute
// path, as in Redis, and empty without one.
func TestInfoConfigFile(t *testing.T) {
	configFile := func(cfg server.Config) string {
		_, addr := servertest.Start(t, cfg)
		secs, _ := parseInfo(t, info(t, addr, "server"))
		v, ok := secs["Server"].values["config_file"]
		if !ok {
			t.Fatal("no config_file in INFO server")
		}
		return v
	}
	if got := configFile(server.Config{}); got != "" {
		t.Errorf("without a file: config_file %q, want empty", got)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := configFile(server.Config{ConfigFile: "cellserver.conf"}), filepath.Join(wd, "cellserver.conf"); got != want {
		t.Errorf("config_file %q, want %q", got, want)
	}
}

// TestModulesConsistent: MODULE LIST, HELLO's modules field and INFO
// modules all report redis-cell, with the same name and version, so a
// client that checks for the module finds it whichever it asks.
func TestModulesConsistent(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	c := resptest.MustDial(t, addr)
	entry := func(what string, m resptest.Value) (string, string) {
		t.Helper()
		if m.Kind != '*' || len(m.Elems) != 8 {
			t.Fatalf("%s: module entry %v, want name, ver, path, args", what, m)
		}
		f := map[string]resptest.Value{}
		for i := 0; i < 8; i += 2 {
			f[m.Elems[i].Str] = m.Elems[i+1]
		}
		if f["ver"].Kind != ':' || f["path"].Kind != '$' || f["args"].Kind != '*' {
			t.Errorf("%s: module entry %v: want ver an integer, path a string, args an array", what, m)
		}
		return f["name"].Str, f["ver"].Str
	}
	list := c.MustDo(t, "MODULE", "LIST")
	if list.Kind != '*' || len(list.Elems) != 1 {
		t.Fatalf("MODULE LIST: %v, want one module", list)
	}
	name, ver := entry("MODULE LIST", list.Elems[0])
	hello := c.MustDo(t, "HELLO")
	if hello.Kind != '*' || len(hello.Elems) != 14 || hello.Elems[12].Str != "modules" || len(hello.Elems[13].Elems) != 1 {
		t.Fatalf("HELLO: %v, want one module", hello)
	}
	hName, hVer := entry("HELLO", hello.Elems[13].Elems[0])
	secs, _ := parseInfo(t, info(t, addr, "modules"))
	line := secs["Modules"].values["module"]
	if name != "redis-cell" || hName != name || hVer != ver ||
		!strings.HasPrefix(line, "name="+name+",ver="+ver+",") {
		t.Errorf("MODULE LIST %s %s, HELLO %s %s, INFO module:%s: want redis-cell everywhere, one version", name, ver, hName, hVer, line)
	}
}

// TestInfoSectionsSelected pins which sections INFO replies, in which
// order, for no argument, "default", "all", "everything" and each
// section's name (in any case).
func TestInfoSectionsSelected(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	every := []string{"Server", "Clients", "Memory", "Persistence", "Stats", "Replication", "CPU", "Modules",
		"Commandstats", "Limiters", "Errorstats", "Cluster", "Migrations", "Policies", "RLS", "Keyspace"}
	notDefault := []string{"Commandstats", "Migrations", "Policies", "RLS"}
	deflt := slices.DeleteFunc(slices.Clone(every), func(s string) bool { return slices.Contains(notDefault, s) })
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, deflt},
		{[]string{"default"}, deflt},
		{[]string{"all"}, every},
		{[]string{"everything"}, every},
		{[]string{"default", "rls"}, append(slices.Clone(deflt[:len(deflt)-1]), "RLS", "Keyspace")},
		{[]string{"keyspace", "server"}, []string{"Server", "Keyspace"}},
		{[]string{"nosuch"}, nil},
	} {
		if _, got := parseInfo(t, info(t, addr, tc.args...)); !slices.Equal(got, tc.want) {
			t.Errorf("INFO %v: sections %v, want %v", tc.args, got, tc.want)
		}
	}
	for _, title := range every {
		for _, name := range []string{strings.ToLower(title), strings.ToUpper(title)} {
			if _, got := parseInfo(t, info(t, addr, name)); !slices.Equal(got, []string{title}) {
				t.Errorf("INFO %s: sections %v, want [%s]", name, got, title)
			}
		}
	}
	t.Logf("%d sections checked by name", len(every))
}
