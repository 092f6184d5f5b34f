package clustertool

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Create makes a cluster of addrs: their ids from the nodes, the first
// len(addrs)/(replicas+1) nodes masters with the 16384 slots split evenly
// (as redis-cli --cluster create splits them), the others replicas dealt
// to the masters in turn (replicas per master, the remainder to the first
// masters), each told to replicate its master (REPLICAOF). The topology
// is pushed to every node, then checked. A node that already holds a
// topology is refused: add nodes to a cluster with AddNode.
func (t *Tool) Create(addrs []string, replicas int) error {
	if replicas < 0 {
		return errors.New("--replicas must not be negative")
	}
	if len(addrs) == 0 {
		return errors.New("create needs at least one HOST:PORT")
	}
	masters := len(addrs) / (replicas + 1)
	if masters < 1 {
		return fmt.Errorf("%d nodes cannot make a master with %d replicas", len(addrs), replicas)
	}
	nodes := make([]Node, len(addrs))
	ids := map[string]string{}
	for i, a := range addrs {
		n, err := resolve(a)
		if err != nil {
			return err
		}
		c, err := t.Dialer.Dial(n.Addr())
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		n.ID, err = myID(c)
		if err == nil {
			var top Topology
			if top, err = getConfig(c); err == nil && top != nil {
				err = fmt.Errorf("%s already holds a topology of %d shards: add nodes to a cluster with add-node", a, len(top))
			}
		}
		c.Close()
		if err != nil {
			return err
		}
		if other, dup := ids[n.ID]; dup {
			return fmt.Errorf("%s and %s have the same id %s", other, a, n.ID)
		}
		ids[n.ID] = a
		nodes[i] = n
	}
	top := make(Topology, masters)
	for i, r := range splitSlots(masters) {
		top[i] = Shard{SlotRanges: []SlotRange{{r[0], r[1]}}, Master: nodes[i], Replicas: []Node{}}
	}
	for i, n := range nodes[masters:] {
		s := i % masters
		top[s].Replicas = append(top[s].Replicas, n)
	}
	for _, s := range top {
		t.logf("M: %s %s slots %s (%d slots)", s.Master.ID, s.Master.Addr(), FormatRanges(s.SlotRanges), s.SlotRanges[0].End-s.SlotRanges[0].Start+1)
		for _, r := range s.Replicas {
			t.logf("S: %s %s replicates %s", r.ID, r.Addr(), s.Master.ID)
		}
	}
	if err := t.push(top); err != nil {
		return err
	}
	t.logf(">>> Topology pushed to %d nodes", len(nodes))
	if err := t.replicate(top); err != nil {
		return err
	}
	rep, err := t.check(nodes[0].Addr())
	if err != nil {
		return err
	}
	if t.JSON {
		if err := t.emit(map[string]any{"topology": top, "check": rep}); err != nil {
			return err
		}
	} else {
		rep.print(t)
	}
	if !rep.OK {
		return ErrCheck
	}
	return nil
}

// replicate sends REPLICAOF to every replica of top and waits (30s at
// most each) until it reports its link to its master up.
func (t *Tool) replicate(top Topology) error {
	for _, s := range top {
		for _, r := range s.Replicas {
			if err := t.replicaOf(r, s.Master); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Tool) replicaOf(r, master Node) error {
	c, err := t.Dialer.Dial(r.Addr())
	if err != nil {
		return fmt.Errorf("%s: %w", r.Addr(), err)
	}
	defer c.Close()
	if _, err := c.Do("REPLICAOF", master.IP, fmt.Sprint(master.Port)); err != nil {
		return fmt.Errorf("%s: REPLICAOF %s: %w", r.Addr(), master.Addr(), err)
	}
	t.logf(">>> %s replicates %s", r.Addr(), master.Addr())
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := replicationInfo(c)
		if err != nil {
			return fmt.Errorf("%s: %w", r.Addr(), err)
		}
		if info["master_link_status"] == "up" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the replication link to %s is not up after 30s (master_link_status:%s; with --requirepass, start replicas with --masterauth)",
				r.Addr(), master.Addr(), info["master_link_status"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// replicationInfo returns INFO replication's fields.
func replicationInfo(c *Conn) (map[string]string, error) {
	s, err := c.String("INFO", "replication")
	if err != nil {
		return nil, fmt.Errorf("INFO replication: %w", err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// AddNode adds the node at newAddr to the cluster existing belongs to: as
// a master without slots (give it slots with Reshard or Rebalance), or,
// with replicaOf (a master's id, or a unique prefix of 8 digits or more),
// as that master's replica (told to replicate it). The new topology is
// pushed to every node, the new one included.
func (t *Tool) AddNode(newAddr, existing, replicaOf string) error {
	top, err := t.readTopology(existing)
	if err != nil {
		return err
	}
	n, err := resolve(newAddr)
	if err != nil {
		return err
	}
	c, err := t.Dialer.Dial(n.Addr())
	if err != nil {
		return fmt.Errorf("%s: %w", newAddr, err)
	}
	n.ID, err = myID(c)
	c.Close()
	if err != nil {
		return err
	}
	if top.Find(n.ID) {
		return fmt.Errorf("%s (id %s) is already in the cluster", newAddr, n.ID)
	}
	for _, o := range top.Nodes() {
		if o.Addr() == n.Addr() {
			return fmt.Errorf("the cluster already has a node at %s (id %s)", n.Addr(), o.ID)
		}
	}
	nt := top.Clone()
	role, master := "master", Node{}
	if replicaOf != "" {
		i := nt.Master(replicaOf)
		if i < 0 {
			return fmt.Errorf("no master (or more than one) has the id %s", replicaOf)
		}
		nt[i].Replicas = append(nt[i].Replicas, n)
		role, master = "replica", nt[i].Master
	} else {
		nt = append(nt, Shard{SlotRanges: []SlotRange{}, Master: n, Replicas: []Node{}})
	}
	if err := t.push(nt); err != nil {
		return err
	}
	t.logf(">>> %s (id %s) added as a %s", n.Addr(), n.ID, role)
	if role == "replica" {
		if err := t.replicaOf(n, master); err != nil {
			return err
		}
	}
	return t.emit(map[string]any{"added": n, "role": role, "master": master.ID, "topology": nt})
}
