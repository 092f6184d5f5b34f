package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/dashboard"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

const policyFile = `policies:
  - name: api
    algorithm: gcra
    burst: 1
    count: 1
    period: 1m
  - name: api-next
    algorithm: gcra
    count: 1
    period: 1m
    shadow: true
`

func getState(t *testing.T, base string) (dashboard.State, map[string]any) {
	t.Helper()
	resp, err := http.Get(base + "/dashboard/state.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("state.json: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	var st dashboard.State
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("state.json: %v\n%s", err, b)
	}
	var raw map[string]any
	dec = json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		t.Fatal(err)
	}
	return st, raw
}

// leaves flattens v into path -> scalar, arrays as "[i]".
func leaves(prefix string, v any, out map[string]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			leaves(p, e, out)
		}
	case []any:
		for i, e := range x {
			leaves(prefix+"["+strconv.Itoa(i)+"]", e, out)
		}
	default:
		out[prefix] = x
	}
}

// typePaths lists State's JSON paths, arrays as "[]".
func typePaths(prefix string, t reflect.Type, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			typePaths(p, t.Field(i).Type, out)
		}
	case reflect.Slice:
		typePaths(prefix+"[]", t.Elem(), out)
	default:
		out[prefix] = true
	}
}

var index = regexp.MustCompile(`\[\d+\]`)

// check compares state.json's leaves with want (a value, or a func(any)
// error for what is not known exactly) and, once all the subtests ran,
// fails for any field of State no want checked.
type checker struct {
	t       *testing.T
	covered map[string]bool
}

func (c *checker) check(raw map[string]any, want map[string]any) {
	c.t.Helper()
	got := map[string]any{}
	leaves("", raw, got)
	for path, w := range want {
		g, ok := got[path]
		if !ok {
			c.t.Errorf("state.json has no %s", path)
			continue
		}
		c.covered[index.ReplaceAllString(path, "[]")] = true
		if f, ok := w.(func(any) error); ok {
			if err := f(g); err != nil {
				c.t.Errorf("%s = %v: %v", path, g, err)
			}
			continue
		}
		if fmt.Sprint(g) != fmt.Sprint(w) {
			c.t.Errorf("%s = %v, want %v", path, g, w)
		}
	}
}

func (c *checker) done() {
	all := map[string]bool{}
	typePaths("", reflect.TypeOf(dashboard.State{}), all)
	var missing []string
	for p := range all {
		if !c.covered[p] {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		c.t.Errorf("state.json fields no test checks: %v", missing)
	}
}

func number(v any) float64 {
	n, ok := v.(json.Number)
	if !ok {
		return -1
	}
	f, err := n.Float64()
	if err != nil {
		return -1
	}
	return f
}

func positive(v any) error {
	if f := number(v); f <= 0 {
		return fmt.Errorf("want > 0")
	}
	return nil
}

func nonNegative(v any) error {
	if f := number(v); f < 0 {
		return fmt.Errorf("want >= 0")
	}
	return nil
}

// keyIn returns a key "prefix:<n>" whose slot is in [lo, hi].
func keyIn(prefix string, lo, hi uint16) string {
	for i := 0; ; i++ {
		k := prefix + ":" + strconv.Itoa(i)
		if s := keyslot.Of([]byte(k)); s >= lo && s <= hi {
			return k
		}
	}
}

// TestStateJSON checks every field of GET /dashboard/state.json on a
// cluster-mode node with policies, persistence and maxmemory after known
// traffic, and the replication fields on a replica.
func TestStateJSON(t *testing.T) {
	c := &checker{t: t, covered: map[string]bool{}}
	defer c.done()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(pol, []byte(policyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := servertest.NewClock(time.Unix(1795312945, 0))
	myID, otherID, replicaID := topotest.ID("me"), topotest.ID("other"), topotest.ID("other-r")
	srv, addr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler, Clock: clk.Now,
		Version: "9.8.7-test", Policies: pol, MaxMemory: 64 << 20,
		DataDir: filepath.Join(dir, "data"), OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{}),
		ClusterEnabled: true, ClusterNodeID: myID})
	base := "http://" + srv.MetricsAddr().String()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer rdb.Close()
	ctx := context.Background()
	host, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	topo, _ := json.Marshal([]cluster.Shard{
		{SlotRanges: []cluster.SlotRange{{Start: 0, End: 8191}}, Master: cluster.Node{ID: myID, IP: host, Port: p}, Replicas: []cluster.Node{}},
		{SlotRanges: []cluster.SlotRange{{Start: 8192, End: 10000}, {Start: 10001, End: 16383}}, Master: cluster.Node{ID: otherID, IP: "10.0.0.2", Port: 7000},
			Replicas: []cluster.Node{{ID: replicaID, IP: "10.0.0.3", Port: 7000}}},
	})
	if err := rdb.Do(ctx, "CELLCLUSTER", "CONFIG", string(topo)).Err(); err != nil {
		t.Fatal(err)
	}
	// api (burst 1): allowed, allowed, limited. api-next (shadow, no
	// burst): allowed, shadow-limited (replied as allowed). One call to an
	// unknown policy: an error reply.
	k1, k2 := keyIn("api", 0, 8191), keyIn("next", 0, 8191)
	for range 3 {
		rdb.Do(ctx, "CL.APPLY", k1, "api")
	}
	for range 2 {
		rdb.Do(ctx, "CL.APPLY", k2, "api-next")
	}
	if err := rdb.Do(ctx, "CL.APPLY", k1, "nosuch").Err(); err == nil {
		t.Fatal("CL.APPLY of an unknown policy: no error")
	}
	// The limited prefixes are those of the last complete interval.
	clk.Advance(commands.DefaultTopPrefixInterval + time.Second)
	// The writer writes and syncs on its own goroutine.
	var st dashboard.State
	var raw map[string]any
	testwait.For(t, 10*time.Second, "the changes written and synced", func() (bool, string) {
		st, raw = getState(t, base)
		return st.Persistence != nil && st.Persistence.WrittenChanges > 0 && st.Persistence.LastSyncMS > 0, fmt.Sprintf("%+v", st.Persistence)
	})
	runID := rdb.Info(ctx, "server").Val()
	runID = runID[strings.Index(runID, "run_id:")+7:][:40]
	latency := func(v any) error {
		b, ok := v.([]any)
		if !ok || len(b) != len(commands.LatencyBuckets) {
			return fmt.Errorf("want the %d bounds", len(commands.LatencyBuckets))
		}
		for i, e := range b {
			if number(e) != commands.LatencyBuckets[i] {
				return fmt.Errorf("bound %d: %v, want %v", i, e, commands.LatencyBuckets[i])
			}
		}
		return nil
	}
	var lat []any
	for _, e := range raw["latency_buckets_s"].([]any) {
		lat = append(lat, e)
	}
	if err := latency(lat); err != nil {
		t.Error(err)
	}
	want := map[string]any{
		"schema": dashboard.SchemaVersion, "time_ms": clk.Now().UnixMilli(), "version": "9.8.7-test", "run_id": runID,
		"alerts.refusal_ratio": 0.1, "alerts.refusal_window_s": 300, "alerts.memory_ratio": 0.9,
		"policies[0].name": "api", "policies[0].allowed": 2, "policies[0].limited": 1, "policies[0].shadow_limited": 0,
		"policies[1].name": "api-next", "policies[1].allowed": 1, "policies[1].limited": 0, "policies[1].shadow_limited": 1,
		"top_limited_prefixes[0].prefix": "api", "top_limited_prefixes[0].limited": 1, "prefixes_untracked": 0,
		"latency_buckets_s[0]": latencyBound(0), "latency_buckets_s[14]": latencyBound(14),
		"errors":            positive,
		"clients.connected": 1, "clients.total": positive, "clients.rejected": 0,
		"memory.used_bytes": positive, "memory.max_bytes": 64 << 20, "memory.evicted_keys": 0, "memory.oom_refusals": 0,
		"persistence.fsync": "everysec", "persistence.failed": false, "persistence.error": "", "persistence.failing_since_ms": 0,
		"persistence.pending_changes": nonNegative, "persistence.pending_bytes": nonNegative,
		"persistence.max_pending_bytes": persistence.DefaultMaxPending, "persistence.written_changes": positive,
		"persistence.last_sync_ms": positive, "persistence.disk_bytes": positive,
		"replication.role": "primary", "replication.link_up": true, "replication.link_down_s": 0, "replication.offset_bytes": infoLine(t, rdb.Info(ctx, "replication").Val(), "master_repl_offset"),
		"replication.connected_replicas": 0, "replication.lag_bytes": 0, "replication.lag_s": 0,
		"cluster.node_id":     myID,
		"cluster.nodes[0].id": myID, "cluster.nodes[0].addr": addr, "cluster.nodes[0].slots": 8192, "cluster.nodes[0].replicas": 0, "cluster.nodes[0].myself": true,
		"cluster.nodes[1].id": otherID, "cluster.nodes[1].addr": "10.0.0.2:7000", "cluster.nodes[1].slots": 8192, "cluster.nodes[1].replicas": 1, "cluster.nodes[1].myself": false,
	}
	// The limiter and command counters, as INFO shows them.
	info := rdb.Info(ctx, "limiters", "commandstats").Val()
	for i, l := range st.Limiters {
		want[fmt.Sprintf("limiters[%d].command", i)] = l.Command
		var a, lim int64
		line := infoLine(t, info, "limiter_"+l.Command)
		if _, err := fmt.Sscanf(line, "allowed=%d,limited=%d", &a, &lim); err != nil {
			t.Errorf("INFO limiter_%s:%s: %v", l.Command, line, err)
		}
		want[fmt.Sprintf("limiters[%d].allowed", i)] = a
		want[fmt.Sprintf("limiters[%d].limited", i)] = lim
	}
	if len(st.Limiters) != 1 || st.Limiters[0].Command != "cl.apply" || st.Limiters[0].Limited != 1 {
		t.Errorf("limiters: %+v, want cl.apply with 1 limited", st.Limiters)
	}
	found := false
	for i, cmd := range st.Commands {
		if cmd.Name != "cl.apply" {
			continue
		}
		found = true
		pre := fmt.Sprintf("commands[%d].", i)
		want[pre+"name"], want[pre+"calls"], want[pre+"failed"], want[pre+"rejected"], want[pre+"sum_s"] = "cl.apply", 6, 1, 0, positive
		want[pre+"buckets[15]"] = 6 // +Inf: every call
		want[pre+"buckets[0]"] = nonNegative
		if len(cmd.Buckets) != len(commands.LatencyBuckets)+1 {
			t.Errorf("cl.apply: %d buckets, want %d", len(cmd.Buckets), len(commands.LatencyBuckets)+1)
		}
		if !strings.Contains(info, "cmdstat_cl.apply:calls=6,") {
			t.Errorf("INFO commandstats disagrees: %s", info)
		}
	}
	if !found {
		t.Errorf("no cl.apply in commands: %+v", st.Commands)
	}
	c.check(raw, want)

	t.Run("replica", func(t *testing.T) {
		rsrv, raddr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler})
		rc := redis.NewClient(&redis.Options{Addr: raddr})
		defer rc.Close()
		// A primary that is not there: the link stays down.
		if err := rc.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
			t.Fatal(err)
		}
		_, rraw := getState(t, "http://"+rsrv.MetricsAddr().String())
		c.check(rraw, map[string]any{"replication.role": "replica", "replication.link_up": false, "replication.link_down_s": nonNegative,
			"persistence": nil, "cluster": nil})
	})
}

// infoLine returns the value of the field name in INFO text.
func infoLine(t *testing.T, info, name string) string {
	t.Helper()
	i := strings.Index(info, name+":")
	if i < 0 {
		t.Errorf("INFO has no %s", name)
		return ""
	}
	v, _, _ := strings.Cut(info[i+len(name)+1:], "\r\n")
	return v
}

// TestAlertThresholds: the thresholds the page draws are those of the
// shipped alert rules.
func TestAlertThresholds(t *testing.T) {
	b, err := os.ReadFile("../monitoring/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	rules := string(b)
	for _, want := range []string{
		fmt.Sprintf("expr: job_policy:cellserver_policy_limited:ratio_rate5m > %.2f", dashboard.RefusalAlertRatio),
		fmt.Sprintf("expr: job_policy:cellserver_policy_shadow_limited:ratio_rate5m > %.2f", dashboard.RefusalAlertRatio),
		fmt.Sprintf("expr: cellserver_state_memory_bytes / (cellserver_maxmemory_bytes > 0) > %g", dashboard.MemoryAlertRatio),
		fmt.Sprintf("rate(cellserver_policy_decisions_total[%dm])", int(dashboard.RefusalAlertWindow/time.Minute)),
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("alerts.yml has no %q", want)
		}
	}
}

func latencyBound(i int) func(any) error {
	return func(v any) error {
		if number(v) != commands.LatencyBuckets[i] {
			return fmt.Errorf("want %v", commands.LatencyBuckets[i])
		}
		return nil
	}
}
