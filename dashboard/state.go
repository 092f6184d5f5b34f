package dashboard

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/server"
)

// SchemaVersion is State's "schema". It changes only when a field is
// removed, renamed or changes meaning; fields may be added within a
// version (a reader ignores the ones it does not know).
const SchemaVersion = 1

// The thresholds of the alert rules shipped in
// monitoring/prometheus/alerts.yml, for the page to draw its lines at
// (dashboard_test.go checks them against the file).
const (
	// RefusalAlertRatio: CellserverPolicyRefusalRatioHigh fires above this
	// share of a policy's decisions limited, over RefusalAlertWindow
	// (CellserverShadowPolicyWouldRefuse: the same for shadow_limited).
	RefusalAlertRatio  = 0.10
	RefusalAlertWindow = 5 * time.Minute
	// MemoryAlertRatio: CellserverMemoryNearMaxmemory fires above this
	// share of maxmemory.
	MemoryAlertRatio = 0.9
)

// MaxPrefixLen is the longest key prefix shown, in bytes, as the metrics'
// label (metrics.MaxPrefixLabelLen): longer ones are cut at a rune
// boundary.
const MaxPrefixLen = 128

// State is GET /dashboard/state.json: one snapshot of the node, read from
// counters the server keeps anyway (no key is visited). Counters are
// totals since the start; the page turns two snapshots into rates. The
// fields are documented in docs/observability.md.
type State struct {
	Schema  int    `json:"schema"`
	TimeMS  int64  `json:"time_ms"` // the server's clock, Unix milliseconds
	Version string `json:"version"`
	RunID   string `json:"run_id"`

	Alerts Alerts `json:"alerts"`

	Policies []Policy  `json:"policies"`
	Limiters []Limiter `json:"limiters"`
	// TopLimitedPrefixes: the most limited key prefixes of the last
	// complete interval (cellserver_limited_key_prefix_top), most limited
	// first; PrefixesUntracked the limited decisions whose prefix did not
	// fit the table.
	TopLimitedPrefixes []Prefix `json:"top_limited_prefixes"`
	PrefixesUntracked  int64    `json:"prefixes_untracked"`

	// LatencyBucketsS are the upper bounds, in seconds, of Commands'
	// Buckets (the last bucket, one more, is +Inf).
	LatencyBucketsS []float64 `json:"latency_buckets_s"`
	Commands        []Command `json:"commands"`
	Errors          int64     `json:"errors"` // error replies, all codes

	Clients     Clients      `json:"clients"`
	Memory      Memory       `json:"memory"`
	Persistence *Persistence `json:"persistence"` // null without --data-dir
	Replication Replication  `json:"replication"`
	Cluster     *Cluster     `json:"cluster"` // null unless cluster mode
}

// Alerts are the shipped alert rules' thresholds.
type Alerts struct {
	RefusalRatio   float64 `json:"refusal_ratio"`
	RefusalWindowS int     `json:"refusal_window_s"`
	MemoryRatio    float64 `json:"memory_ratio"`
}

// Policy is one policy's decisions (cellserver_policy_decisions_total).
type Policy struct {
	Name          string `json:"name"`
	Allowed       int64  `json:"allowed"`
	Limited       int64  `json:"limited"`
	ShadowLimited int64  `json:"shadow_limited"`
}

// Limiter is one limiter command's decisions
// (cellserver_limiter_decisions_total).
type Limiter struct {
	Command string `json:"command"`
	Allowed int64  `json:"allowed"`
	Limited int64  `json:"limited"`
}

// Prefix is one of the most limited key prefixes.
type Prefix struct {
	Prefix  string `json:"prefix"`
	Limited int64  `json:"limited"`
}

// Command is one command's calls and latency histogram
// (cellserver_command_duration_seconds): Buckets are cumulative counts
// per LatencyBucketsS bound, then +Inf (the count).
type Command struct {
	Name     string   `json:"name"`
	Calls    int64    `json:"calls"`
	Failed   int64    `json:"failed"`
	Rejected int64    `json:"rejected"`
	SumS     float64  `json:"sum_s"`
	Buckets  []uint64 `json:"buckets"`
}

// Clients are the connection counters.
type Clients struct {
	Connected int64 `json:"connected"`
	Total     int64 `json:"total"`
	Rejected  int64 `json:"rejected"`
}

// Memory is the limiter state's memory against maxmemory.
type Memory struct {
	UsedBytes   int64 `json:"used_bytes"`
	MaxBytes    int64 `json:"max_bytes"` // 0: no cap
	EvictedKeys int64 `json:"evicted_keys"`
	OOMRefusals int64 `json:"oom_refusals"`
}

// Persistence is the write path to the data directory.
type Persistence struct {
	Fsync           string `json:"fsync"`
	Failed          bool   `json:"failed"`
	Error           string `json:"error"`            // "" unless Failed
	FailingSinceMS  int64  `json:"failing_since_ms"` // 0 unless Failed
	PendingChanges  int    `json:"pending_changes"`
	PendingBytes    int64  `json:"pending_bytes"`
	MaxPendingBytes int64  `json:"max_pending_bytes"`
	WrittenChanges  uint64 `json:"written_changes"`
	LastSyncMS      int64  `json:"last_sync_ms"` // 0: none yet
	DiskBytes       int64  `json:"disk_bytes"`
}

// Replication is the node's role and links.
type Replication struct {
	Role              string  `json:"role"` // "primary" or "replica"
	LinkUp            bool    `json:"link_up"`
	LinkDownS         float64 `json:"link_down_s"`
	OffsetBytes       int64   `json:"offset_bytes"`
	ConnectedReplicas int     `json:"connected_replicas"`
	LagBytes          int64   `json:"lag_bytes"`
	LagS              float64 `json:"lag_s"`
}

// Cluster is the installed topology, one entry per shard.
type Cluster struct {
	NodeID string  `json:"node_id"`
	Nodes  []Shard `json:"nodes"` // empty until a topology is installed
}

// Shard is a master with its slots.
type Shard struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Slots    int    `json:"slots"`
	Replicas int    `json:"replicas"`
	Myself   bool   `json:"myself"`
}

// Snapshot reads src into a State at now.
func Snapshot(src server.MetricsSources, now time.Time) State {
	st := State{Schema: SchemaVersion, TimeMS: now.UnixMilli(), Version: src.Version,
		Alerts:   Alerts{RefusalRatio: RefusalAlertRatio, RefusalWindowS: int(RefusalAlertWindow / time.Second), MemoryRatio: MemoryAlertRatio},
		Policies: []Policy{}, Limiters: []Limiter{}, TopLimitedPrefixes: []Prefix{}, Commands: []Command{},
		LatencyBucketsS: commands.LatencyBuckets}
	if c := src.Commands; c != nil {
		st.RunID = c.RunID()
		cs := c.Stats()
		for _, p := range cs.Policies {
			st.Policies = append(st.Policies, Policy{p.Name, p.Allowed, p.Limited, p.ShadowLimited})
		}
		for _, cmd := range cs.Commands {
			if cmd.Limiter {
				st.Limiters = append(st.Limiters, Limiter{cmd.Name, cmd.Allowed, cmd.Limited})
			}
			st.Commands = append(st.Commands, Command{cmd.Name, cmd.Calls, cmd.Failed, cmd.Rejected, cmd.Sum, cmd.Buckets})
		}
		st.TopLimitedPrefixes = prefixes(cs.LimitedPrefix)
		st.PrefixesUntracked = cs.LimitedDropped
		for _, n := range cs.Errors {
			st.Errors += n
		}
		st.Memory = Memory{cs.StateMemory, cs.MaxMemory, cs.EvictedKeys, cs.OOMRefusals}
	}
	if n := src.Network; n != nil {
		ns := n.Stats()
		st.Clients = Clients{ns.ConnectedClients, ns.TotalConnections, ns.RejectedConnections}
	}
	if w := src.Writer; w != nil {
		ws := w.Stats()
		p := &Persistence{Fsync: ws.Mode.String(), PendingChanges: ws.Pending, PendingBytes: ws.PendingBytes,
			MaxPendingBytes: ws.MaxPending, WrittenChanges: ws.Written}
		if ws.Err != nil {
			p.Failed, p.Error, p.FailingSinceMS = true, ws.Err.Error(), unixMS(ws.FailingSince)
		}
		p.LastSyncMS = unixMS(ws.LastSync)
		if src.Store != nil {
			p.DiskBytes = src.Store.DiskUsage()
		}
		st.Persistence = p
	}
	if r := src.Replication; r != nil {
		rs := r.Stats()
		st.Replication = Replication{Role: "primary", LinkUp: rs.LinkUp, LinkDownS: rs.LinkDownSeconds, OffsetBytes: rs.Offset,
			ConnectedReplicas: rs.ConnectedReplicas, LagBytes: rs.MaxLagBytes, LagS: rs.MaxLagSeconds}
		if rs.Replica {
			st.Replication.Role = "replica"
		}
	} else {
		st.Replication = Replication{Role: "primary", LinkUp: true}
	}
	if cl := src.Cluster; cl != nil {
		v := cl.View()
		c := &Cluster{NodeID: v.ID, Nodes: []Shard{}}
		if v.T != nil {
			for i := range v.T.Shards {
				sh := &v.T.Shards[i]
				n := 0
				for _, r := range sh.SlotRanges {
					n += r.End - r.Start + 1
				}
				c.Nodes = append(c.Nodes, Shard{ID: sh.Master.ID, Addr: sh.Master.Addr(), Slots: n,
					Replicas: len(sh.Replicas), Myself: sh == v.Me})
			}
		}
		st.Cluster = c
	}
	return st
}

func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// prefixes makes key prefixes what the metrics show (metrics.prefixLabels):
// at most MaxPrefixLen bytes cut at a rune boundary, invalid UTF-8 as
// U+FFFD, equal results merged; most limited first.
func prefixes(in []commands.PrefixCount) []Prefix {
	out := make([]Prefix, 0, len(in))
	idx := make(map[string]int, len(in))
	for _, p := range in {
		l := prefixLabel(p.Prefix)
		if i, ok := idx[l]; ok {
			out[i].Limited += p.Count
			continue
		}
		idx[l] = len(out)
		out = append(out, Prefix{l, p.Count})
	}
	// A merge may have changed the order: insertion sort (at most
	// --metrics-top-prefixes entries).
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Limited > out[j-1].Limited; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func prefixLabel(s string) string {
	if len(s) > MaxPrefixLen {
		s = s[:MaxPrefixLen]
		for i := 0; i < utf8.UTFMax-1 && len(s) > 0; i++ {
			if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
				break
			}
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
