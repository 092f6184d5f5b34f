package cluster

import (
	"strconv"
	"strings"
)

// Reply builders for the text replies of CLUSTER NODES and CLUSTER INFO,
// in Redis 7.0's formats. What cellserver cannot know as Redis does (it
// has no gossip bus) is shown as a fresh Redis node shows it: ping and
// pong times 0, the bus port as port+10000, every listed node connected.
// A shard's config epoch is its position by lowest slot, from 1; a shard
// without slots has epoch 0, as a Redis master that joined empty (and its
// replicas) shows until it is given slots.

// epochs returns each shard's config epoch (absent: 0) and the highest.
func (t *Topology) epochs() (e map[*Shard]int, current int) {
	e = map[*Shard]int{}
	ranges := t.RangesByShard()
	for _, sh := range t.OrderedShards() {
		if len(ranges[sh]) > 0 {
			current++
			e[sh] = current
		}
	}
	return e, current
}

// Nodes is CLUSTER NODES: one line per node, each ending in "\n".
func (v *View) Nodes() string {
	var b strings.Builder
	line := func(n Node, flags, master string, epoch int, ranges [][2]int) {
		b.WriteString(n.ID)
		b.WriteByte(' ')
		if n.IP != "" {
			b.WriteString(n.IP)
		}
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(n.Port))
		b.WriteByte('@')
		cport := 0
		if n.Port != 0 {
			cport = n.Port + 10000
		}
		b.WriteString(strconv.Itoa(cport))
		b.WriteString(" " + flags + " " + master + " 0 0 " + strconv.Itoa(epoch) + " connected")
		for _, r := range ranges {
			b.WriteByte(' ')
			b.WriteString(strconv.Itoa(r[0]))
			if r[1] != r[0] {
				b.WriteByte('-')
				b.WriteString(strconv.Itoa(r[1]))
			}
		}
		b.WriteByte('\n')
	}
	if v.Me == nil {
		line(Node{ID: v.ID, IP: v.Addr.IP, Port: v.Addr.Port}, "myself,master", "-", 0, nil)
	}
	if v.T == nil {
		return b.String()
	}
	ep, _ := v.T.epochs()
	ranges := v.T.RangesByShard()
	for _, sh := range v.T.OrderedShards() {
		flags := "master"
		if sh.Master.ID == v.ID {
			flags = "myself,master"
		}
		line(sh.Master, flags, "-", ep[sh], ranges[sh])
		for _, r := range sh.Replicas {
			flags := "slave"
			if r.ID == v.ID {
				flags = "myself,slave"
			}
			line(r, flags, sh.Master.ID, ep[sh], nil)
		}
	}
	return b.String()
}

// Info is CLUSTER INFO: lines ending in "\r\n". Without a topology it is
// what a fresh Redis 7.0 cluster node answers.
func (v *View) Info() string {
	state, assigned, known, size, current, mine := "fail", 0, 1, 1, 0, 0
	if v.T != nil {
		// cluster_size is, as Redis's, the masters serving at least one
		// slot: a master that joined empty is known but not counted.
		ep, cur := v.T.epochs()
		state, assigned, size, current = "ok", 16384, cur, cur
		known = 0
		for _, sh := range v.T.Shards {
			known += 1 + len(sh.Replicas)
		}
		if v.Me == nil {
			known++
		} else {
			mine = ep[v.Me]
		}
	}
	itoa := strconv.Itoa
	return strings.Join([]string{
		"cluster_state:" + state,
		"cluster_slots_assigned:" + itoa(assigned),
		"cluster_slots_ok:" + itoa(assigned),
		"cluster_slots_pfail:0",
		"cluster_slots_fail:0",
		"cluster_known_nodes:" + itoa(known),
		"cluster_size:" + itoa(size),
		"cluster_current_epoch:" + itoa(current),
		"cluster_my_epoch:" + itoa(mine),
		"cluster_stats_messages_sent:0",
		"cluster_stats_messages_received:0",
		"total_cluster_links_buffer_limit_exceeded:0",
	}, "\r\n") + "\r\n"
}
