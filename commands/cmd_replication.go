package commands

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/replication"
	"github.com/tidwall/redcon"
)

// replRole is the node's replication (its methods promoted) and the
// settings that refuse commands by role (Config.ReplicaPriority ...
// MinReplicasMaxLag, KillReplicationLinks).
type replRole struct {
	*replication.Replication
	priority    int  // INFO slave_priority
	writable    bool // replica-read-only no
	noStale     bool // replica-serve-stale-data no
	minReplicas int  // min-replicas-to-write
	minLag      time.Duration
	killLinks   func(kind string) int // CLIENT KILL TYPE master|replica
}

// replState is what one client told the primary with REPLCONF before
// PSYNC, and how far the stream had got after its last write.
type replState struct {
	port int    // listening-port
	ip   string // ip-address
	capa bool   // a cellserver replica of the current stream version (capa replication.Capability)
	node string // node-id: the replica's node ID, checked for loops
	// off is the replication offset after the client's last write command
	// (what WAIT waits for).
	off int64
}

// replCheck refuses a command the node's replication role forbids, as
// Redis's processCommand does: writes while too few good replicas are
// attached (min-replicas-to-write), writes on a read-only replica, and
// commands without the stale flag while a replica that must not serve
// stale data has no link. It returns the error, or noErr.
func (s *Service) replCheck(cl *client, sp *Spec) wireErr {
	write := sp.Flags&Write != 0 || sp.Name == "exec" && queuedWrite(cl.multi.queue)
	replica := s.repl.IsReplica()
	if write && !replica && s.repl.minReplicas > 0 && s.repl.GoodReplicas(s.repl.minLag) < s.repl.minReplicas {
		return msgNoReplicas
	}
	if write && replica && !s.repl.writable {
		return msgReadOnly
	}
	if replica && s.repl.noStale && sp.Flags&Stale == 0 && !s.repl.LinkUp() {
		return msgMasterDown
	}
	return noErr
}

// Replication returns the node's replication state.
func (s *Service) Replication() *replication.Replication { return s.repl.Replication }

// REPLICAOF host port | NO ONE (and SLAVEOF).
func cmdReplicaOf(x *ctx) {
	s := x.s
	if strings.EqualFold(string(x.args[1]), "no") && strings.EqualFold(string(x.args[2]), "one") {
		s.repl.NoOne()
		x.ok()
		return
	}
	port, err := strconv.ParseInt(string(x.args[2]), 10, 64)
	if err != nil || port < 0 || port > 65535 {
		x.errorReply(msgInvalidMasterPort)
		return
	}
	host := string(x.args[1])
	if s.repl.ReplicaOf(host, int(port)) {
		x.status("OK Already connected to specified master")
		return
	}
	x.ok()
}

// ROLE.
func cmdRole(x *ctx) {
	ro := x.s.repl.Role()
	if !ro.Replica {
		x.array(3)
		x.bulkStr("master")
		x.int(ro.Offset)
		x.array(len(ro.Replicas))
		for _, rep := range ro.Replicas {
			x.array(3)
			x.bulkStr(rep.IP)
			x.bulkStr(strconv.Itoa(rep.Port))
			x.bulkStr(strconv.FormatInt(rep.Ack, 10))
		}
		return
	}
	x.array(5)
	x.bulkStr("slave")
	x.bulkStr(ro.Host)
	x.int(int64(ro.Port))
	x.bulkStr(ro.State)
	x.int(ro.Offset)
}

// WAIT numreplicas timeout.
func cmdWait(x *ctx) {
	s := x.s
	if s.repl.IsReplica() {
		x.errorReply(msgWaitReplica)
		return
	}
	n, err := strconv.ParseInt(string(x.args[1]), 10, 64)
	if err != nil {
		x.errorReply(msgNotInt)
		return
	}
	ms, err := strconv.ParseInt(string(x.args[2]), 10, 64)
	if err != nil {
		x.errorReply(msgTimeoutNotInt)
		return
	}
	if ms < 0 {
		x.errorReply(msgTimeoutNegative)
		return
	}
	off := x.cl.repl.off
	if c := s.repl.Acked(off); int64(c) >= n || x.inExec {
		x.int(int64(c))
		return
	}
	resume, b := x.block()
	b.leave = s.repl.Wait(off, int(min(n, 1<<30)), time.Duration(ms)*time.Millisecond, func(c int) {
		resume(redcon.AppendInt(nil, int64(c)))
	})
}

// REPLCONF option value ... (from a replica, before PSYNC).
func cmdReplconf(x *ctx) {
	if len(x.args)%2 == 0 {
		x.errorReply(msgSyntax)
		return
	}
	st := &x.cl.repl
	reply := "OK"
	for i := 1; i+1 < len(x.args); i += 2 {
		opt, val := strings.ToLower(string(x.args[i])), string(x.args[i+1])
		switch opt {
		case "listening-port":
			p, err := strconv.Atoi(val)
			if err != nil || p < 0 || p > 65535 {
				x.errorReply(msgNotInt)
				return
			}
			st.port = p
		case "ip-address":
			st.ip = val
		case "capa":
			if val == replication.Capability {
				st.capa = true
			}
		case "node-id":
			// A cellserver replica names itself: refused if this node
			// replicates from it; else told which nodes this one
			// replicates from, to refuse them in turn.
			ids, err := x.s.repl.Hello(val)
			if err != nil {
				x.errorReply(msgReplicationLoop)
				return
			}
			st.node = val
			reply = "OK " + ids
		case "ack", "getack", "rdb-only", "rdb-filter-only":
			// Redis's own stream options: cellserver's stream acknowledges
			// in its own frames.
		default:
			x.errorReply(errUnrecognizedReplconf(string(x.args[i])))
			return
		}
	}
	x.status(reply)
}

// PSYNC replid offset (and SYNC): the connection becomes a replication
// link to a cellserver replica.
func cmdPsync(x *ctx) {
	s := x.s
	st := x.cl.repl
	if !st.capa {
		x.errorReply(msgNotCellserverReplica)
		return
	}
	if s.repl.IsReplica() && !s.repl.LinkUp() {
		x.errorReply(msgNoMasterLink)
		return
	}
	replid, off := "?", int64(-1)
	if x.spec.Name == "psync" {
		replid = string(x.args[1])
		o, err := strconv.ParseInt(string(x.args[2]), 10, 64)
		if err != nil {
			x.errorReply(msgNotInt)
			return
		}
		off = o
	}
	ip := st.ip
	if ip == "" {
		ip, _, _ = net.SplitHostPort(x.c.RemoteAddr())
	}
	sy, err := s.repl.Psync(replid, off, ip, st.port, st.node)
	switch {
	case errors.Is(err, replication.ErrMaxReplicas):
		// Replicas are clients (Redis): past maxclients, refused as a
		// client past it is, and closed.
		x.errorReply(msgMaxClients)
		x.c.CloseAfterReply()
		return
	case err != nil:
		x.errorReply(msgReplicationLoop)
		return
	}
	x.c.Out = append(x.c.Out, sy.Reply...)
	x.c.Hijack(func(nc net.Conn, rest []byte) { sy.Serve(nc, rest) })
}
