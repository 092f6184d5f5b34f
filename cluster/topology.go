// Package cluster holds a cellserver node's view of a Redis Cluster style
// topology: which node (and shard) owns each of the 16384 hash slots, as
// set from outside in Dragonfly's DFLYCLUSTER CONFIG JSON format, and the
// node's own identity. There is no gossip and no failover here: an
// external manager pushes the same topology to every node
// (CELLCLUSTER CONFIG) and each node finds itself in it by id.
//
// The JSON is an array of shards:
//
//	[{"slot_ranges":[{"start":0,"end":5460}],
//	  "master":{"id":"…","ip":"127.0.0.1","port":7001},
//	  "replicas":[{"id":"…","ip":"127.0.0.1","port":7004}]}, …]
//
// A Topology is immutable once parsed; State swaps the installed one
// atomically, so a command reads one consistent topology without a lock.
//
// Before any topology is installed a node serves no slot: every command
// with keys gets "CLUSTERDOWN Hash slot not served", as a fresh Redis
// Cluster node (and Dragonfly's --cluster_mode=yes) answers. A node cannot
// tell a lone deployment from the first of several started at once; were
// it to own every slot by default, two nodes started together could each
// admit a full limit for the same key before the topology reaches them.
// A single node is one CELLCLUSTER CONFIG away from serving everything
// (a one-shard topology listing itself, with CELLCLUSTER MYID's id), and
// with --cluster-config-file it keeps that across restarts, so redis-cli
// -c works from then on without MOVED.
//
// # Limits
//
// A topology lists at most MaxNodes nodes (masters and replicas), at most
// MaxReplicas replicas per shard, and node ids of MaxIDLen (40) hex
// digits; Parse refuses a larger one before building anything, so the
// node keeps the topology it had. CLUSTER SLOTS lists a shard's nodes once
// per slot range it serves, so its size is ranges × nodes per shard: with
// 16384 one-slot ranges and shards of 1 + MaxReplicas nodes and 45-byte
// IPv6 addresses it is 21,047,612 bytes (RESP2 or RESP3; commands'
// TestClusterReplySizeBound), under the default client output buffer
// limit of 64 MiB; with IPv4 addresses about 16 MB.
// CLUSTER SHARDS and CLUSTER NODES list each node once and each range
// once: under 1 MB. Each reply is built once per view, so per installed
// topology, and protocol (View.Reply).
//
// When a new topology (or a new node id) takes slots away from this node,
// their keys are deleted in the background (State.Install); a node given
// slots by a topology alone starts them empty (a moved key's limit
// restarts on its new owner). A declared migration (Shard.Migrations,
// migration.go) moves slots with their keys' state instead. A key that
// does not move keeps its state and its one owner throughout.
package cluster

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/cellserver/cellserver/keyslot"
)

// ErrInvalid wraps every reason Parse rejects a topology for; the wire
// error is "ERR Invalid cluster configuration: <reason>".
var ErrInvalid = errors.New("cluster: invalid configuration")

const (
	// MaxNodes bounds the nodes of a topology, masters and replicas
	// together: Redis Cluster's documented practical limit is 1000 nodes.
	MaxNodes = 1000
	// MaxReplicas bounds the replicas of one shard. CLUSTER SLOTS repeats
	// a shard's nodes for every range it serves, so this bound (with
	// MaxNodes and MaxIDLen) is what keeps that reply under the default
	// client output buffer limit (64 MiB) for every topology accepted.
	// Managed Redis Cluster services allow fewer (AWS ElastiCache: 5).
	MaxReplicas = 10
)

// Node is one cellserver node of the topology.
type Node struct {
	ID   string `json:"id"`
	IP   string `json:"ip"`
	Port int    `json:"port"`
}

// Addr returns "ip:port" as MOVED and CLUSTER NODES show it.
func (n Node) Addr() string { return n.IP + ":" + strconv.Itoa(n.Port) }

// SlotRange is an inclusive range of slots.
type SlotRange struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Shard is a master, its replicas and the slots they serve.
type Shard struct {
	SlotRanges []SlotRange `json:"slot_ranges"`
	Master     Node        `json:"master"`
	Replicas   []Node      `json:"replicas"`
	// Migrations are the slot migrations out of this shard the topology
	// declares (Dragonfly's format): each moves some of its slots, with
	// their keys' state, to another shard's master (migration.go).
	Migrations []Migration `json:"migrations,omitempty"`
}

// Migration is a declared move of slots from the shard that lists it to
// the master NodeID (at IP:Port).
type Migration struct {
	SlotRanges []SlotRange `json:"slot_ranges"`
	NodeID     string      `json:"node_id"`
	IP         string      `json:"ip"`
	Port       int         `json:"port"`
}

// MaxMigrations bounds the migrations a topology declares.
const MaxMigrations = 64

// noShard marks a slot no shard owns (only before any topology).
const noShard = -1

// Topology is a validated cluster configuration. It is never modified
// after Parse.
type Topology struct {
	Shards []Shard
	// owner is the index in Shards of each slot's shard.
	owner [keyslot.Slots]int16
	raw   []byte // the JSON as given, for the config file
}

// Raw returns the JSON the topology was parsed from.
func (t *Topology) Raw() []byte { return t.raw }

// Owner returns the shard serving slot, or nil if none does (a nil
// Topology serves no slot).
func (t *Topology) Owner(slot uint16) *Shard {
	if t == nil {
		return nil
	}
	i := t.owner[slot&(keyslot.Slots-1)]
	if i == noShard {
		return nil
	}
	return &t.Shards[i]
}

// Find returns the shard holding node id as its master or a replica, and
// whether id is the master; sh is nil if id is not in the topology.
func (t *Topology) Find(id string) (sh *Shard, master bool) {
	if t == nil {
		return nil, false
	}
	for i := range t.Shards {
		s := &t.Shards[i]
		if s.Master.ID == id {
			return s, true
		}
		for _, r := range s.Replicas {
			if r.ID == id {
				return s, false
			}
		}
	}
	return nil, false
}

// Parse validates a topology in DFLYCLUSTER CONFIG's JSON format: an array
// of at least one shard, every slot 0..16383 owned exactly once, at most
// MaxNodes nodes and MaxReplicas replicas per shard, node ids unique and
// valid (ValidID: 40 lower-case hex digits), ips valid IPv4 or IPv6
// addresses, ports in 1..65535. A shard may own no slot (slot_ranges
// empty or absent): a master that joined empty, as a Redis Cluster master
// without slots, or the target of a migration; it serves nothing until a
// topology gives it slots. Unknown fields are refused, so that a typo is not
// ignored. The sizes are checked first, before anything is built.
func Parse(data []byte) (*Topology, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var shards []Shard
	if err := dec.Decode(&shards); err != nil {
		return nil, bad("not a JSON array of shards: %v", err)
	}
	if dec.More() {
		return nil, bad("trailing data after the JSON array")
	}
	if len(shards) == 0 {
		return nil, bad("no shards")
	}
	nodes := 0
	for si, sh := range shards {
		if len(sh.Replicas) > MaxReplicas {
			return nil, bad("shard %d has %d replicas, more than the limit of %d", si, len(sh.Replicas), MaxReplicas)
		}
		nodes += 1 + len(sh.Replicas)
	}
	if nodes > MaxNodes {
		return nil, bad("%d nodes (masters and replicas), more than the limit of %d", nodes, MaxNodes)
	}
	t := &Topology{Shards: shards, raw: append([]byte(nil), bytes.TrimSpace(data)...)}
	for i := range t.owner {
		t.owner[i] = noShard
	}
	ids := map[string]bool{}
	addrs := map[string]string{}
	checkNode := func(si int, role string, n Node) error {
		where := fmt.Sprintf("shard %d %s", si, role)
		if n.ID == "" {
			return bad("%s: missing id", where)
		}
		if why := ValidID(n.ID); why != "" {
			if len(n.ID) > 2*MaxIDLen {
				return bad("%s: id of %d bytes: %s", where, len(n.ID), why)
			}
			return bad("%s: id %q: %s", where, n.ID, why)
		}
		if ids[n.ID] {
			return bad("duplicate node id %q", n.ID)
		}
		ids[n.ID] = true
		ip, err := netip.ParseAddr(n.IP)
		if err != nil || ip.Zone() != "" {
			return bad("%s %s: invalid ip %q", where, n.ID, n.IP)
		}
		if n.Port < 1 || n.Port > 65535 {
			return bad("%s %s: invalid port %d", where, n.ID, n.Port)
		}
		if other, dup := addrs[n.Addr()]; dup {
			return bad("nodes %q and %q share the address %s", other, n.ID, n.Addr())
		}
		addrs[n.Addr()] = n.ID
		return nil
	}
	for si, sh := range shards {
		if err := checkNode(si, "master", sh.Master); err != nil {
			return nil, err
		}
		for _, r := range sh.Replicas {
			if err := checkNode(si, "replica", r); err != nil {
				return nil, err
			}
		}
		for _, r := range sh.SlotRanges {
			if r.Start < 0 || r.End >= keyslot.Slots || r.Start > r.End {
				return nil, bad("shard %d: invalid slot range %d-%d", si, r.Start, r.End)
			}
			for s := r.Start; s <= r.End; s++ {
				if o := t.owner[s]; o != noShard {
					return nil, bad("slot %d is owned by shards %d and %d", s, o, si)
				}
				t.owner[s] = int16(si)
			}
		}
	}
	for s, o := range t.owner {
		if o == noShard {
			return nil, bad("slot %d is not owned by any shard", s)
		}
	}
	if err := t.checkMigrations(bad); err != nil {
		return nil, err
	}
	return t, nil
}

// checkMigrations validates the declared migrations: each moves slots its
// shard owns to the master of another shard, at that master's address; a
// slot moves at most once, and a pair of nodes has one migration at most.
func (t *Topology) checkMigrations(bad func(string, ...any) error) error {
	n := 0
	var moving [keyslot.Slots]bool
	pairs := map[string]bool{}
	for si := range t.Shards {
		sh := &t.Shards[si]
		for _, m := range sh.Migrations {
			if n++; n > MaxMigrations {
				return bad("more than %d migrations", MaxMigrations)
			}
			target, master := t.Find(m.NodeID)
			switch {
			case target == nil || !master:
				return bad("shard %d: migration to %q, which is not the master of a shard", si, m.NodeID)
			case target == sh:
				return bad("shard %d: migration to its own master", si)
			case target.Master.IP != m.IP || target.Master.Port != m.Port:
				return bad("shard %d: migration to %q at %s:%d, but the topology has it at %s", si, m.NodeID, m.IP, m.Port, target.Master.Addr())
			case pairs[sh.Master.ID+" "+m.NodeID]:
				return bad("shard %d: two migrations to %q", si, m.NodeID)
			case len(m.SlotRanges) == 0:
				return bad("shard %d: migration to %q has no slot ranges", si, m.NodeID)
			}
			pairs[sh.Master.ID+" "+m.NodeID] = true
			for _, r := range m.SlotRanges {
				if r.Start < 0 || r.End >= keyslot.Slots || r.Start > r.End {
					return bad("shard %d: migration to %q: invalid slot range %d-%d", si, m.NodeID, r.Start, r.End)
				}
				for s := r.Start; s <= r.End; s++ {
					if t.owner[s] != int16(si) {
						return bad("shard %d: migration to %q: slot %d is not the shard's", si, m.NodeID, s)
					}
					if moving[s] {
						return bad("slot %d is in two migrations", s)
					}
					moving[s] = true
				}
			}
		}
	}
	return nil
}

// SlotSet is a set of slots.
type SlotSet [keyslot.Slots]bool

// Set returns the slots of ranges.
func Set(ranges []SlotRange) *SlotSet {
	var s SlotSet
	for _, r := range ranges {
		for i := r.Start; i <= r.End; i++ {
			s[i] = true
		}
	}
	return &s
}

// RangesString formats ranges as "a-b,c-d" (SLOT-MIGRATION-STATUS).
func RangesString(ranges []SlotRange) string {
	var b strings.Builder
	for i, r := range ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r.Start))
		b.WriteByte('-')
		b.WriteString(strconv.Itoa(r.End))
	}
	return b.String()
}

// Range is a run of consecutive slots served by one shard, for CLUSTER
// SLOTS.
type Range struct {
	Start, End int
	Shard      *Shard
}

// Ranges returns the topology's slot ranges in slot order, adjacent ranges
// of one shard merged (Redis's CLUSTER SLOTS lists them so).
func (t *Topology) Ranges() []Range {
	if t == nil {
		return nil
	}
	var out []Range
	for s := 0; s < keyslot.Slots; {
		o := t.owner[s]
		e := s
		for e+1 < keyslot.Slots && t.owner[e+1] == o {
			e++
		}
		if o != noShard {
			out = append(out, Range{Start: s, End: e, Shard: &t.Shards[o]})
		}
		s = e + 1
	}
	return out
}

// ShardRanges returns the merged slot ranges of shard sh in slot order.
// It walks every slot: to list every shard's ranges, use RangesByShard.
func (t *Topology) ShardRanges(sh *Shard) [][2]int {
	var out [][2]int
	for _, r := range t.Ranges() {
		if r.Shard == sh {
			out = append(out, [2]int{r.Start, r.End})
		}
	}
	return out
}

// RangesByShard returns every shard's merged slot ranges in slot order
// (ShardRanges of each shard), from one walk of the slots.
func (t *Topology) RangesByShard() map[*Shard][][2]int {
	out := map[*Shard][][2]int{}
	for _, r := range t.Ranges() {
		out[r.Shard] = append(out[r.Shard], [2]int{r.Start, r.End})
	}
	return out
}

// ShardID is the 40-hex id of a shard (CLUSTER MYSHARDID): derived from
// its master's id, so every node computes the same one.
func ShardID(sh *Shard) string {
	h := sha1.Sum([]byte("cellserver-shard:" + sh.Master.ID))
	return hex.EncodeToString(h[:])
}

// byFirstSlot returns the indexes of t's shards ordered by their lowest
// slot, the order CLUSTER SHARDS and CLUSTER NODES list them in; shards
// without slots come last, in the topology's order.
func (t *Topology) byFirstSlot() []int {
	first := make([]int, len(t.Shards))
	for i := range first {
		first[i] = keyslot.Slots
	}
	for s := keyslot.Slots - 1; s >= 0; s-- {
		first[t.owner[s]] = s
	}
	idx := make([]int, len(t.Shards))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return first[idx[a]] < first[idx[b]] })
	return idx
}

// OrderedShards returns the shards by their lowest slot.
func (t *Topology) OrderedShards() []*Shard {
	if t == nil {
		return nil
	}
	var out []*Shard
	for _, i := range t.byFirstSlot() {
		out = append(out, &t.Shards[i])
	}
	return out
}
