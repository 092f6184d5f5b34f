package clustertool

import (
	"fmt"
	"strconv"
)

// NodeReport is one node as check saw it.
type NodeReport struct {
	Addr      string `json:"addr"`
	ID        string `json:"id"`
	Role      string `json:"role"` // master or replica, as the topology lists it
	Reachable bool   `json:"reachable"`
	// SameTopology: the node holds the topology of the node checked.
	SameTopology bool   `json:"same_topology"`
	Slots        int    `json:"slots"`
	Error        string `json:"error,omitempty"`
}

// CheckReport is check's result: OK when Problems is empty.
type CheckReport struct {
	OK         bool         `json:"ok"`
	Nodes      []NodeReport `json:"nodes"`
	Migrations []string     `json:"migrations,omitempty"` // in progress
	Problems   []string     `json:"problems"`
}

func (r *CheckReport) print(t *Tool) {
	for _, n := range r.Nodes {
		state := "ok"
		if n.Error != "" {
			state = n.Error
		}
		t.logf("%-7s %s %s %d slots: %s", n.Role, n.ID, n.Addr, n.Slots, state)
	}
	for _, m := range r.Migrations {
		t.logf("[..] migration in progress: %s", m)
	}
	for _, p := range r.Problems {
		t.logf("[ERR] %s", p)
	}
	if r.OK {
		t.logf("[OK] All nodes agree about the topology; all 16384 slots covered.")
	}
}

// Check checks the cluster addr belongs to: every node of its topology
// reachable, holding the same topology and the id it is listed with
// (replicas replicating their master); every slot owned exactly once; no
// migration failed or left open after it finished. It returns ErrCheck
// (exit status 1) when there is a problem.
func (t *Tool) Check(addr string) error {
	rep, err := t.check(addr)
	if err != nil {
		return err
	}
	if t.JSON {
		if err := t.emit(rep); err != nil {
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

func (t *Tool) check(addr string) (*CheckReport, error) {
	n, err := resolve(addr)
	if err != nil {
		return nil, err
	}
	top, err := t.readTopology(n.Addr())
	if err != nil {
		return nil, err
	}
	rep := &CheckReport{Problems: []string{}}
	_, problems := top.Owners()
	rep.Problems = append(rep.Problems, problems...)
	want := top.Canonical()
	for si, s := range top {
		for i, nd := range append([]Node{s.Master}, s.Replicas...) {
			role := "master"
			if i > 0 {
				role = "replica"
			}
			nr := NodeReport{Addr: nd.Addr(), ID: nd.ID, Role: role, Slots: top.SlotCount(si)}
			nr.Error = t.checkNode(top, want, nd, s.Master, role, &nr)
			if nr.Error != "" {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s %s: %s", role, nd.Addr(), nr.Error))
			}
			rep.Nodes = append(rep.Nodes, nr)
		}
	}
	for _, s := range top {
		for _, m := range s.Migrations {
			desc := fmt.Sprintf("slots %s from %s to %s", FormatRanges(m.SlotRanges), s.Master.Addr(), joinHostPort(m.IP, m.Port))
			st, err := t.migrationState(s.Master.Addr(), m.NodeID, FormatRanges(m.SlotRanges))
			switch {
			case err != nil:
				rep.Problems = append(rep.Problems, fmt.Sprintf("migration of %s: %v", desc, err))
			case st.State == "FINISHED":
				rep.Problems = append(rep.Problems, fmt.Sprintf("migration of %s finished but the topology still declares it: push the closing topology", desc))
			case st.State == "FATAL" || st.State == "ERROR":
				rep.Problems = append(rep.Problems, fmt.Sprintf("migration of %s: %s: %s", desc, st.State, st.Error))
			default:
				rep.Migrations = append(rep.Migrations, fmt.Sprintf("%s: %s, %d keys", desc, st.State, st.Keys))
			}
		}
	}
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

// checkNode returns what is wrong with node nd ("" if nothing).
func (t *Tool) checkNode(top Topology, want string, nd, master Node, role string, nr *NodeReport) string {
	c, err := t.Dialer.Dial(nd.Addr())
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer c.Close()
	nr.Reachable = true
	id, err := myID(c)
	if err != nil {
		return err.Error()
	}
	if id != nd.ID {
		return fmt.Sprintf("its id is %s, not the %s the topology lists", id, nd.ID)
	}
	got, err := getConfig(c)
	if err != nil {
		return err.Error()
	}
	if got == nil {
		return "holds no topology"
	}
	if got.Canonical() != want {
		return "holds a different topology"
	}
	nr.SameTopology = true
	if role == "replica" {
		info, err := replicationInfo(c)
		if err != nil {
			return err.Error()
		}
		if info["role"] != "slave" || info["master_host"] != master.IP || info["master_port"] != strconv.Itoa(master.Port) {
			return fmt.Sprintf("does not replicate its master %s (role %s, master %s:%s)", master.Addr(), info["role"], info["master_host"], info["master_port"])
		}
	}
	return ""
}

// InfoMaster is one master as info shows it.
type InfoMaster struct {
	Addr     string   `json:"addr"`
	ID       string   `json:"id"`
	Slots    int      `json:"slots"`
	Keys     int64    `json:"keys"` // DBSIZE; -1 when the node did not answer
	Replicas []string `json:"replicas"`
}

// Info describes each master of the cluster addr belongs to: address,
// id, slots, keys (DBSIZE) and replicas.
func (t *Tool) Info(addr string) error {
	n, err := resolve(addr)
	if err != nil {
		return err
	}
	top, err := t.readTopology(n.Addr())
	if err != nil {
		return err
	}
	var out []InfoMaster
	var total int64
	for si, s := range top {
		m := InfoMaster{Addr: s.Master.Addr(), ID: s.Master.ID, Slots: top.SlotCount(si), Keys: -1, Replicas: []string{}}
		for _, r := range s.Replicas {
			m.Replicas = append(m.Replicas, r.Addr())
		}
		if c, err := t.Dialer.Dial(m.Addr); err == nil {
			if v, err := c.Do("DBSIZE"); err == nil {
				if k, ok := v.(int64); ok {
					m.Keys = k
					total += k
				}
			}
			c.Close()
		}
		out = append(out, m)
		keys := strconv.FormatInt(m.Keys, 10)
		if m.Keys < 0 {
			keys = "?"
		}
		t.logf("%s (%s...) -> %s keys | %d slots | %d replicas", m.Addr, short(m.ID), keys, m.Slots, len(m.Replicas))
	}
	t.logf("[OK] %d keys in %d masters.", total, len(top))
	return t.emit(map[string]any{"masters": out, "keys": total})
}
