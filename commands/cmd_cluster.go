package commands

import (
	"errors"
	"strings"
	"sync/atomic"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/keyslot"
)

// Cluster mode (Config.Cluster): the client half of Redis Cluster over a
// topology set from outside (CELLCLUSTER CONFIG). Replies copy Redis
// 7.0.15's shapes; see cluster/replies.go for what cellserver shows where
// Redis shows gossip state.

// clusterMode is the node's cluster state (Config.Cluster; nil: cluster
// mode off) and its slots' keys (Config.ClusterSlots).
type clusterMode struct {
	state *cluster.State
	slots cluster.SlotStore
	// on: the dispatcher computes each key's hash slot (rkey.slot).
	on bool
	// bus forwards PUBLISH and SPUBLISH to the other nodes
	// (Config.PubSubBus); nil: messages stay on this node.
	bus PubSubBus
	// received counts the messages other nodes forwarded here
	// (CELLCLUSTER PUBLISH and SPUBLISH).
	received atomic.Int64
}

// clusterCheck is the slot check of a command about to run or be queued,
// as Redis's getNodeByQuery: noErr when this node serves the command's keys
// (or it has none), else the MOVED, CROSSSLOT or CLUSTERDOWN error. EXEC
// checks its queued commands together: their keys must share one slot.
func (s *Service) clusterCheck(x *ctx, sp *Spec) wireErr {
	if s.cluster.state == nil {
		return noErr
	}
	cl := x.cl
	var slot uint16
	keys, write := false, sp.Flags&Write != 0
	same := func(k uint16) bool {
		if keys && k != slot {
			return false
		}
		slot, keys = k, true
		return true
	}
	if sp.Name == "exec" {
		if !cl.multi.on {
			return noErr
		}
		for _, q := range cl.multi.queue {
			if q.spec.Keys != nil { // movable keys (CL.ALL): as COMMAND GETKEYS finds them
				cl.keyBuf.pos = q.spec.Keys(cl.keyBuf.pos[:0], q.args)
				for _, p := range cl.keyBuf.pos {
					if !same(keyslot.Of(q.args[p])) {
						return msgCrossSlot
					}
				}
			} else {
				first, last := q.spec.keyRange(len(q.args))
				for i := first; i <= last; i += q.spec.Step {
					if !same(keyslot.Of(q.args[i])) {
						return msgCrossSlot
					}
				}
			}
			write = write || q.spec.Flags&Write != 0
		}
	} else {
		// The dispatcher resolved the command's keys and their slots.
		for i := range x.keys {
			if !same(x.keys[i].slot) {
				return msgCrossSlot
			}
		}
	}
	if !keys {
		return noErr
	}
	v := s.cluster.state.View()
	// Shard channels (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH, the pub/sub
	// commands with keys) are served by the slot's replicas too, READONLY
	// or not, as Redis's getNodeByQuery serves them.
	owner, ok := v.Route(slot, cl.readonly || sp.Flags&PubSub != 0, write)
	switch {
	case ok:
		return noErr
	case owner == nil:
		return msgClusterDownUnbound
	}
	return errMoved(int(slot), owner.Master.Addr())
}

// clusterReject answers a command clusterCheck refused, as Redis's
// clusterRedirectClient: the error as it is (EXEC too, which discards the
// transaction), and inside MULTI the transaction is flagged to abort.
func (s *Service) clusterReject(x *ctx, sp *Spec, msg wireErr) {
	cl := x.cl
	sp.stats.rejected.Add(cl.shard, 1)
	if sp.Name == "exec" {
		cl.resetMulti()
		cl.multi.seen.Store(-1)
		s.unwatchAll(cl)
	} else {
		cl.multiFailed()
	}
	x.errorReply(msg)
}

// clusterOn answers the disabled error when cluster mode is off.
func clusterOn(x *ctx) bool {
	if x.s.cluster.state == nil {
		x.errorReply(msgClusterDisabled)
		return false
	}
	return true
}

func cmdReadonly(x *ctx) {
	if clusterOn(x) {
		x.cl.readonly = true
		x.ok()
	}
}

func cmdReadwrite(x *ctx) {
	if clusterOn(x) {
		x.cl.readonly = false
		x.ok()
	}
}

// ASKING is accepted: cellserver never sends ASK (no slot migration).
func cmdAsking(x *ctx) {
	if clusterOn(x) {
		x.ok()
	}
}

// clusterReply writes the reply of kind for the current view: built by
// build the first time a client of this protocol asks for it, then the
// same bytes for every client until a new topology (or node id) replaces
// the view (cluster.View.Reply). The reply is built into a buffer of its
// own (of size bound, when given: CLUSTER SLOTS, tens of MB at most, is
// then built without the copies a growing buffer leaves), with this
// client's protocol, and handed to the connection to write without a copy,
// unless it would pass the output buffer limit: then the client is
// disconnected (resp.Conn.AppendShared).
func (x *ctx) clusterReply(kind cluster.ReplyKind, build func(x *ctx, v *cluster.View), bound func(v *cluster.View) int) {
	v := x.s.cluster.state.View()
	b := v.Reply(kind, x.cl.resp3(), func() []byte {
		out := x.c.Out
		x.c.Out = nil
		if bound != nil {
			x.c.Out = make([]byte, 0, bound(v))
		}
		defer func() { x.c.Out = out }()
		build(x, v)
		if cap(x.c.Out)-len(x.c.Out) <= len(x.c.Out)/8 {
			return x.c.Out
		}
		// Kept for the topology's life: without append's spare capacity.
		return append(make([]byte, 0, len(x.c.Out)), x.c.Out...)
	})
	x.c.AppendShared(b)
}

// CLUSTER SLOTS: [start, end, master, replicas...] per range, each node
// [ip, port, id, {}].
func cmdClusterSlots(x *ctx) {
	if clusterOn(x) {
		x.clusterReply(cluster.ReplySlots, clusterSlots, clusterSlotsBound)
	}
}

// clusterSlotsBound bounds the size of CLUSTER SLOTS (either protocol):
// per range at most 24 bytes of header, start and end, and per node of its
// shard its ip and id and at most 32 bytes around them.
func clusterSlotsBound(v *cluster.View) int {
	n := 16
	nodes := map[*cluster.Shard]int{}
	for _, r := range v.T.Ranges() {
		sz, ok := nodes[r.Shard]
		if !ok {
			for _, nd := range append([]cluster.Node{r.Shard.Master}, r.Shard.Replicas...) {
				sz += len(nd.IP) + len(nd.ID) + 32
			}
			nodes[r.Shard] = sz
		}
		n += 24 + sz
	}
	return n
}

func clusterSlots(x *ctx, v *cluster.View) {
	ranges := v.T.Ranges()
	x.array(len(ranges))
	for _, r := range ranges {
		x.array(3 + len(r.Shard.Replicas))
		x.int(int64(r.Start))
		x.int(int64(r.End))
		for _, n := range append([]cluster.Node{r.Shard.Master}, r.Shard.Replicas...) {
			x.array(4)
			x.bulkStr(n.IP)
			x.int(int64(n.Port))
			x.bulkStr(n.ID)
			x.mapLen(0)
		}
	}
}

// CLUSTER SHARDS: per shard {slots: [start, end, ...], nodes: [{id, port,
// ip, endpoint, role, replication-offset, health}, ...]}.
func cmdClusterShards(x *ctx) {
	if clusterOn(x) {
		x.clusterReply(cluster.ReplyShards, clusterShards, nil)
	}
}

func clusterShards(x *ctx, v *cluster.View) {
	node := func(n cluster.Node, role string) {
		x.mapLen(7)
		x.bulkStr("id")
		x.bulkStr(n.ID)
		x.bulkStr("port")
		x.int(int64(n.Port))
		x.bulkStr("ip")
		x.bulkStr(n.IP)
		x.bulkStr("endpoint")
		x.bulkStr(n.IP)
		x.bulkStr("role")
		x.bulkStr(role)
		x.bulkStr("replication-offset")
		x.int(0)
		x.bulkStr("health")
		x.bulkStr("online")
	}
	shards := v.T.OrderedShards()
	if v.Me == nil {
		// As a Redis node alone: itself, without slots.
		x.array(len(shards) + 1)
		x.mapLen(2)
		x.bulkStr("slots")
		x.array(0)
		x.bulkStr("nodes")
		x.array(1)
		node(v.Addr, "master")
	} else {
		x.array(len(shards))
	}
	ranges := v.T.RangesByShard()
	for _, sh := range shards {
		x.mapLen(2)
		x.bulkStr("slots")
		rs := ranges[sh]
		x.array(2 * len(rs))
		for _, r := range rs {
			x.int(int64(r[0]))
			x.int(int64(r[1]))
		}
		x.bulkStr("nodes")
		x.array(1 + len(sh.Replicas))
		node(sh.Master, "master")
		for _, r := range sh.Replicas {
			node(r, "replica")
		}
	}
}

func cmdClusterNodes(x *ctx) {
	if clusterOn(x) {
		x.clusterReply(cluster.ReplyNodes, func(x *ctx, v *cluster.View) { x.verbatim(v.Nodes()) }, nil)
	}
}

func cmdClusterInfo(x *ctx) {
	if clusterOn(x) {
		x.verbatim(x.s.cluster.state.View().Info())
	}
}

func cmdClusterKeyslot(x *ctx) {
	if clusterOn(x) {
		x.int(int64(keyslot.Of(x.args[2])))
	}
}

func cmdClusterMyID(x *ctx) {
	if clusterOn(x) {
		x.bulkStr(x.s.cluster.state.MyID())
	}
}

// CLUSTER MYSHARDID (Redis 7.2): the 40-hex id of this node's shard.
func cmdClusterMyShardID(x *ctx) {
	if !clusterOn(x) {
		return
	}
	v := x.s.cluster.state.View()
	if v.Me == nil {
		x.bulkStr(cluster.ShardID(&cluster.Shard{Master: cluster.Node{ID: v.ID}}))
		return
	}
	x.bulkStr(cluster.ShardID(v.Me))
}

// parseSlot reads a slot argument as Redis's getSlotOrReply.
func parseSlot(x *ctx, b []byte) (uint16, bool) {
	n, ok := parseRedisInt(b)
	if !ok {
		x.errorReply(msgNotInt)
		return 0, false
	}
	if n < 0 || n >= keyslot.Slots {
		x.errorReply(msgInvalidSlot)
		return 0, false
	}
	return uint16(n), true
}

func cmdClusterCountKeysInSlot(x *ctx) {
	if !clusterOn(x) {
		return
	}
	slot, ok := parseSlot(x, x.args[2])
	if !ok {
		return
	}
	x.int(int64(x.s.cluster.slots.CountKeysInSlot(0, slot)))
}

func cmdClusterGetKeysInSlot(x *ctx) {
	if !clusterOn(x) {
		return
	}
	slot, ok1 := parseRedisInt(x.args[2])
	count, ok2 := parseRedisInt(x.args[3])
	if !ok1 || !ok2 {
		x.errorReply(msgNotInt)
		return
	}
	if slot < 0 || slot >= keyslot.Slots || count < 0 {
		x.errorReply(msgInvalidSlotOrCount)
		return
	}
	keys := x.s.cluster.slots.KeysInSlot(0, uint16(slot), int(min(count, 1<<20)))
	x.array(len(keys))
	for _, k := range keys {
		x.bulk(k)
	}
}

func cmdClusterHelp(x *ctx) {
	if !clusterOn(x) {
		return
	}
	helpReply(x,
		"CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"COUNTKEYSINSLOT <slot>",
		"    Return the number of keys in <slot>.",
		"GETKEYSINSLOT <slot> <count>",
		"    Return key names stored by current node in a slot.",
		"INFO",
		"    Return information about the cluster.",
		"KEYSLOT <key>",
		"    Return the hash slot for <key>.",
		"MYID",
		"    Return the node id.",
		"MYSHARDID",
		"    Return the node's shard id.",
		"NODES",
		"    Return cluster configuration seen by node. Output format:",
		"    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
		"SHARDS",
		"    Return information about slot range mappings and the nodes associated with them.",
		"SLOTS",
		"    Return information about slots range mappings. Each range is made of:",
		"    start, end, master and replicas IP addresses, ports and ids",
		"HELP",
		"    Print this help.",
		"The topology is set with CELLCLUSTER CONFIG.")
}

// CELLCLUSTER CONFIG <json>: validate and install a topology.
func cmdCellClusterConfig(x *ctx) {
	if !clusterOn(x) {
		return
	}
	t, err := cluster.Parse(x.args[2])
	if err != nil {
		x.errorReply(errInvalidClusterConfig(strings.TrimPrefix(err.Error(), cluster.ErrInvalid.Error()+": ")))
		return
	}
	if err := x.s.cluster.state.Install(t); err != nil {
		x.errorReply(errClusterConfigFile(err))
		return
	}
	x.ok()
}

// CELLCLUSTER GETCONFIG: the installed topology's JSON as CELLCLUSTER
// CONFIG (or the config file) gave it, or a nil bulk before any: what
// `cellserver cluster` reads to change a topology and compares across
// nodes.
func cmdCellClusterGetConfig(x *ctx) {
	if !clusterOn(x) {
		return
	}
	t := x.s.cluster.state.View().T
	if t == nil {
		x.null()
		return
	}
	x.bulk(t.Raw())
}

// CELLCLUSTER MYID [<id>]: show or set this node's id.
func cmdCellClusterMyID(x *ctx) {
	if !clusterOn(x) {
		return
	}
	switch len(x.args) {
	case 2:
		x.bulkStr(x.s.cluster.state.MyID())
		return
	case 3:
		if err := x.s.cluster.state.SetMyID(string(x.args[2])); err != nil {
			if errors.Is(err, cluster.ErrInvalidID) {
				x.errorReply(errInvalidNodeID(strings.TrimPrefix(err.Error(), cluster.ErrInvalidID.Error()+": ")))
				return
			}
			x.errorReply(errClusterConfigFile(err))
			return
		}
		x.ok()
		return
	}
	x.errorReply(errWrongArity("cellcluster|myid"))
}

// CELLCLUSTER PUBLISH channel message and CELLCLUSTER SPUBLISH
// shardchannel message: a message published on another node, forwarded
// by its pub/sub link (cluster.Bus), delivered to this node's subscribers
// only and never forwarded again. The reply counts them. Flagged admin:
// only an authenticated client runs it (the links authenticate as
// replicas do).
func cmdCellClusterPublish(x *ctx) {
	if !clusterOn(x) {
		return
	}
	x.s.cluster.received.Add(1)
	x.int(x.s.pubsub.publish(x.args[2], x.args[3]))
}

func cmdCellClusterSPublish(x *ctx) {
	if !clusterOn(x) {
		return
	}
	x.s.cluster.received.Add(1)
	x.int(x.s.pubsub.publishShard(x.args[2], x.args[3]))
}

func cmdCellClusterHelp(x *ctx) {
	helpReply(x,
		"CELLCLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"CONFIG <json>",
		"    Install a cluster topology (Dragonfly's DFLYCLUSTER CONFIG JSON: an array of",
		"    {slot_ranges:[{start,end}], master:{id,ip,port}, replicas:[{id,ip,port}],",
		"    migrations:[{slot_ranges, node_id, ip, port}]}).",
		"GETCONFIG",
		"    Return the installed topology's JSON (nil before any).",
		"MYID [<id>]",
		"    Return this node's id, or set it.",
		"SLOT-MIGRATION-STATUS [<node_id>]",
		"    List this node's slot migrations (with node_id: those with that node):",
		"    [direction, peer_id, state, keys_migrated, error, slot_ranges] each.",
		"PUBLISH <channel> <message>",
		"    Deliver a message published on another node to this node's subscribers",
		"    (internal: sent by the nodes' pub/sub links).",
		"SPUBLISH <shardchannel> <message>",
		"    The same for a shard channel (SPUBLISH on a node of this shard).",
		"HELP",
		"    Print this help.")
}

// CELLCLUSTER SLOT-MIGRATION-STATUS [node_id]: the node's migrations, as
// Dragonfly's DFLYCLUSTER SLOT-MIGRATION-STATUS lists them.
func cmdCellClusterMigrationStatus(x *ctx) {
	if !clusterOn(x) {
		return
	}
	if len(x.args) > 3 {
		x.errorReply(errWrongArity("cellcluster|slot-migration-status"))
		return
	}
	peer := ""
	if len(x.args) == 3 {
		peer = string(x.args[2])
	}
	ms := x.s.cluster.state.Migrations(peer)
	x.array(len(ms))
	for _, m := range ms {
		x.array(6)
		x.bulkStr(m.Direction)
		x.bulkStr(m.Peer)
		x.bulkStr(m.State)
		x.int(m.Keys)
		x.bulkStr(m.Error)
		x.bulkStr(m.Slots)
	}
}

// The target's half of a slot migration (cluster/migration.go): commands
// a source node sends on one authenticated connection, in order.

// migrateReply answers one of them.
func migrateReply(x *ctx, err error) {
	if err != nil {
		x.errorReply(errMigration(err))
		return
	}
	x.ok()
}

func cmdCellClusterMigrateStart(x *ctx) {
	if !clusterOn(x) {
		return
	}
	source := string(x.args[2])
	err := x.s.cluster.state.MigrateStart(source, x.c.ID())
	if err == nil {
		x.cl.migSource = source // its end, before MIGRATE-END, drops the keys (Service.Close)
	}
	migrateReply(x, err)
}

func cmdCellClusterMigratePut(x *ctx) {
	if clusterOn(x) {
		migrateReply(x, x.s.cluster.state.MigratePut(string(x.args[2]), x.c.ID(), x.args[3], x.args[4]))
	}
}

func cmdCellClusterMigrateDel(x *ctx) {
	if clusterOn(x) {
		migrateReply(x, x.s.cluster.state.MigrateDel(string(x.args[2]), x.c.ID(), x.args[3]))
	}
}

func cmdCellClusterMigrateEnd(x *ctx) {
	if clusterOn(x) {
		migrateReply(x, x.s.cluster.state.MigrateEnd(string(x.args[2]), x.c.ID()))
	}
}

// migrationRecheck is the check a write makes under its shard locks while
// slots migrate out of this node (cluster.State.StillServes): the route it
// took before its locks may predate a handover. noErr when this node still
// serves every key's slot; TRYAGAIN while one is being handed over; MOVED
// once it has been.
func (x *ctx) migrationRecheck(slots func(yield func(uint16) bool)) wireErr {
	st := x.s.cluster.state
	msg := wireErr(noErr)
	slots(func(slot uint16) bool {
		frozen, owner, ok := st.StillServes(slot, x.cl.readonly)
		switch {
		case frozen:
			msg = msgTryAgainMigrating
		case !ok && owner != nil:
			msg = errMoved(int(slot), owner.Master.Addr())
		case !ok:
			msg = msgClusterDownUnbound
		}
		return msg == noErr
	})
	return msg
}

// redisMode is INFO's redis_mode and HELLO's mode.
func (s *Service) redisMode() string {
	if s.cluster.state != nil {
		return "cluster"
	}
	return "standalone"
}
