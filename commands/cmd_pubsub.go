package commands

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/glob"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/resp"
)

// Pub/sub, with Redis 7.0's replies (src/pubsub.c). A client subscribes to
// channels (SUBSCRIBE), to glob patterns (PSUBSCRIBE) and to shard
// channels (SSUBSCRIBE); PUBLISH sends each subscriber of the channel a
// message, and each client subscribed to a matching pattern a pmessage per
// pattern, SPUBLISH each subscriber of the shard channel an smessage, and
// both answer how many were sent on this node. Messages reach the
// subscriber through resp.Conn.Push, which queues them without waiting on
// the subscriber's socket: a slow subscriber never blocks a publisher, and
// one whose queue passes the output buffer limit is closed (as Redis's
// client-output-buffer-limit pubsub class closes it). A publisher pushes
// while holding the table's read lock, so for every subscriber the
// messages of one channel are queued in the order of the PUBLISH calls
// that sent them, and none is sent to a client after its UNSUBSCRIBE
// removed the channel.
//
// In cluster mode (Redis Cluster's semantics) a PUBLISH is also forwarded
// to every other node of the topology, and an SPUBLISH to the other nodes
// of this node's shard, over the node's pub/sub links (cluster.Bus), which
// deliver it with CELLCLUSTER PUBLISH or SPUBLISH to their own subscribers
// only; the reply still counts this node's receivers, as Redis's does.
// Shard channels are routed by their hash slot as keys are: SSUBSCRIBE,
// SUNSUBSCRIBE with channels and SPUBLISH are served by the slot's master
// and, without READONLY, by its replicas, and get MOVED elsewhere and
// CROSSSLOT for channels of several slots. A node that stops serving a
// slot unsubscribes its shard channels' subscribers (an sunsubscribe
// each, as Redis 7). In standalone mode shard channels are channels of
// their own on this node.
//
// In RESP2 a subscribed client may only run (P|S)SUBSCRIBE,
// (P|S)UNSUBSCRIBE, PING, QUIT and RESET (Service.dispatch); in RESP3
// messages are push frames and every command is allowed, as in Redis.

// PubSubBus forwards the messages published on this node to the other
// nodes of the cluster (cluster.Bus); the node's INFO cluster lists its
// links.
type PubSubBus interface {
	Publish(channel, msg []byte)
	SPublish(channel, msg []byte)
	Links() []cluster.LinkStats
}

// pubsubTable is the server's subscription registry. It is safe for
// concurrent use.
type pubsubTable struct {
	// active counts the channels and patterns that have a subscriber:
	// while it is 0, PUBLISH returns without taking the lock.
	active atomic.Int64

	mu       sync.RWMutex
	channels map[string]map[*client]struct{} // channel -> subscribers
	patterns map[string]map[*client]struct{} // pattern -> subscribers
	shard    map[string]map[*client]struct{} // shard channel -> subscribers
}

// subscriptions is a client's part of the registry. chans, pats and
// schans (shard channels), in subscription order, are guarded by
// pubsubTable.mu; nChans, nPats and nShard are their lengths, read by
// CLIENT LIST and the dispatcher.
type subscriptions struct {
	chans  []string
	pats   []string
	schans []string
	nChans atomic.Int32
	nPats  atomic.Int32
	nShard atomic.Int32
}

func newPubsubTable() *pubsubTable {
	return &pubsubTable{
		channels: make(map[string]map[*client]struct{}),
		patterns: make(map[string]map[*client]struct{}),
		shard:    make(map[string]map[*client]struct{}),
	}
}

// subscribed reports whether cl has a channel, pattern or shard channel
// subscription (Redis's CLIENT_PUBSUB flag).
func (cl *client) subscribed() bool { return cl.subCount() > 0 || cl.pubsub.nShard.Load() > 0 }

// subCount is Redis's clientSubscriptionsCount: channels plus patterns.
func (cl *client) subCount() int64 {
	return int64(cl.pubsub.nChans.Load()) + int64(cl.pubsub.nPats.Load())
}

// add subscribes cl to name in m (channels or patterns); list is the
// client's list for m. It reports whether the subscription is new.
func (t *pubsubTable) add(m map[string]map[*client]struct{}, list *[]string, cl *client, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	cls := m[name]
	if _, ok := cls[cl]; ok {
		return false
	}
	if cls == nil {
		cls = make(map[*client]struct{}, 1)
		m[name] = cls
		t.active.Add(1)
	}
	cls[cl] = struct{}{}
	*list = append(*list, name)
	cl.pubsub.storeCounts()
	return true
}

// remove unsubscribes cl from name in m; it reports whether cl was
// subscribed.
func (t *pubsubTable) remove(m map[string]map[*client]struct{}, list *[]string, cl *client, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.removeLocked(m, list, cl, name)
}

func (t *pubsubTable) removeLocked(m map[string]map[*client]struct{}, list *[]string, cl *client, name string) bool {
	cls := m[name]
	if _, ok := cls[cl]; !ok {
		return false
	}
	delete(cls, cl)
	if len(cls) == 0 {
		delete(m, name)
		t.active.Add(-1)
	}
	if i := slices.Index(*list, name); i >= 0 {
		*list = slices.Delete(*list, i, i+1)
	}
	cl.pubsub.storeCounts()
	return true
}

// storeCounts publishes the lengths of the lists. pubsubTable.mu must be
// held.
func (s *subscriptions) storeCounts() {
	s.nChans.Store(int32(len(s.chans)))
	s.nPats.Store(int32(len(s.pats)))
	s.nShard.Store(int32(len(s.schans)))
}

// subKind is one of the three kinds of subscription.
type subKind int

const (
	subChannel subKind = iota // SUBSCRIBE
	subPattern                // PSUBSCRIBE
	subShard                  // SSUBSCRIBE
)

// of returns the registry's map of kind k and cl's list of it.
func (t *pubsubTable) of(k subKind, cl *client) (map[string]map[*client]struct{}, *[]string) {
	switch k {
	case subPattern:
		return t.patterns, &cl.pubsub.pats
	case subShard:
		return t.shard, &cl.pubsub.schans
	}
	return t.channels, &cl.pubsub.chans
}

// names returns a copy of cl's subscriptions of kind k.
func (t *pubsubTable) names(cl *client, k subKind) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, list := t.of(k, cl)
	return slices.Clone(*list)
}

// drop removes every subscription of cl, without replies (RESET, the
// connection's end).
func (t *pubsubTable) drop(cl *client) {
	if !cl.subscribed() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(cl.pubsub.chans) > 0 {
		t.removeLocked(t.channels, &cl.pubsub.chans, cl, cl.pubsub.chans[0])
	}
	for len(cl.pubsub.pats) > 0 {
		t.removeLocked(t.patterns, &cl.pubsub.pats, cl, cl.pubsub.pats[0])
	}
	for len(cl.pubsub.schans) > 0 {
		t.removeLocked(t.shard, &cl.pubsub.schans, cl, cl.pubsub.schans[0])
	}
}

// dropSlots unsubscribes every subscriber of the shard channels whose
// slot lost says, each told with an sunsubscribe push (Redis 7's
// pubsubShardUnsubscribeAllChannelsInSlot, when a node stops serving a
// slot). It returns how many subscriptions it removed.
func (t *pubsubTable) dropSlots(lost func(slot uint16) bool) int {
	if t.active.Load() == 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for ch, cls := range t.shard {
		if !lost(keyslot.Of([]byte(ch))) {
			continue
		}
		for cl := range cls {
			t.removeLocked(t.shard, &cl.pubsub.schans, cl, ch)
			p := resp.RESP2
			if cl.resp3() {
				p = resp.RESP3
			}
			b := resp.AppendPushLen(nil, p, 3)
			b = appendBulk(b, []byte("sunsubscribe"))
			b = appendBulk(b, []byte(ch))
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(len(cl.pubsub.schans)), 10)
			cl.conn.Push(append(b, '\r', '\n'))
			n++
		}
	}
	return n
}

// publish sends msg on channel to its subscribers and to the clients of
// the patterns that match it; it returns how many messages it sent.
func (t *pubsubTable) publish(channel, msg []byte) int64 {
	if t.active.Load() == 0 {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := pushAll(t.channels[string(channel)], "message", nil, channel, msg)
	for pat, cls := range t.patterns {
		if glob.Match([]byte(pat), channel, false) {
			n += pushAll(cls, "pmessage", []byte(pat), channel, msg)
		}
	}
	return n
}

// pushAll pushes one message of kind to every subscriber of subs, each
// in its protocol, encoding it at most once per protocol; it returns how
// many it pushed.
func pushAll(subs map[*client]struct{}, kind string, pattern, channel, msg []byte) int64 {
	var frames [2][]byte // RESP2, RESP3
	var n int64
	for cl := range subs {
		p := protoIndex(cl)
		if frames[p] == nil {
			frames[p] = appendMessage(p, kind, pattern, channel, msg)
		}
		cl.conn.Push(frames[p])
		n++
	}
	return n
}

// publishShard sends msg on shard channel to its subscribers, as an
// smessage; it returns how many messages it sent.
func (t *pubsubTable) publishShard(channel, msg []byte) int64 {
	if t.active.Load() == 0 {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return pushAll(t.shard[string(channel)], "smessage", nil, channel, msg)
}

func protoIndex(cl *client) int {
	if cl.resp3() {
		return 1
	}
	return 0
}

// appendMessage encodes a message of kind (message, pmessage with
// pattern, smessage).
func appendMessage(proto int, kind string, pattern, channel, msg []byte) []byte {
	b := make([]byte, 0, 48+len(pattern)+len(channel)+len(msg))
	p := resp.RESP2
	if proto == 1 {
		p = resp.RESP3
	}
	if pattern == nil {
		b = resp.AppendPushLen(b, p, 3)
	} else {
		b = resp.AppendPushLen(b, p, 4)
	}
	b = appendBulk(b, []byte(kind))
	if pattern != nil {
		b = appendBulk(b, pattern)
	}
	b = appendBulk(b, channel)
	return appendBulk(b, msg)
}

func appendBulk(b, s []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// pushLen starts a pub/sub confirmation: a push of n elements in RESP3,
// an array in RESP2.
func (x *ctx) pushLen(n int) { x.c.Out = resp.AppendPushLen(x.c.Out, x.proto(), n) }

// subReply writes one (un)subscribe confirmation: kind, the channel or
// pattern (nil: a null, for an UNSUBSCRIBE with nothing to remove), and
// the client's remaining subscription count: channels and patterns, or
// shard channels for shard (Redis counts these apart).
func (x *ctx) subReply(kind string, name []byte, shard bool) {
	x.pushLen(3)
	x.bulkStr(kind)
	if name == nil {
		x.null()
	} else {
		x.bulk(name)
	}
	if shard {
		x.int(int64(x.cl.pubsub.nShard.Load()))
	} else {
		x.int(x.cl.subCount())
	}
}

// SUBSCRIBE channel [channel ...]
func cmdSubscribe(x *ctx) { x.subscribe(subChannel, "subscribe") }

// PSUBSCRIBE pattern [pattern ...]
func cmdPSubscribe(x *ctx) { x.subscribe(subPattern, "psubscribe") }

// SSUBSCRIBE shardchannel [shardchannel ...]: refused inside a
// transaction, as Redis refuses it to a client that expects one reply per
// command. The dispatcher checked the channels' slot in cluster mode.
func cmdSSubscribe(x *ctx) {
	if x.inExec {
		x.errorReply(msgSSubscribeDenied)
		return
	}
	x.subscribe(subShard, "ssubscribe")
}

func (x *ctx) subscribe(k subKind, kind string) {
	t := x.s.pubsub
	m, list := t.of(k, x.cl)
	for _, ch := range x.args[1:] {
		t.add(m, list, x.cl, string(ch))
		x.subReply(kind, ch, k == subShard)
	}
}

// UNSUBSCRIBE [channel ...]: without channels, from every channel, one
// reply each, or a single reply with a null channel when there is none.
func cmdUnsubscribe(x *ctx) { x.unsubscribe(subChannel, "unsubscribe") }

// PUNSUBSCRIBE [pattern ...], as UNSUBSCRIBE for patterns.
func cmdPUnsubscribe(x *ctx) { x.unsubscribe(subPattern, "punsubscribe") }

// SUNSUBSCRIBE [shardchannel ...], as UNSUBSCRIBE for shard channels.
func cmdSUnsubscribe(x *ctx) { x.unsubscribe(subShard, "sunsubscribe") }

func (x *ctx) unsubscribe(k subKind, kind string) {
	t := x.s.pubsub
	m, list := t.of(k, x.cl)
	shard := k == subShard
	names := x.args[1:]
	if len(names) == 0 {
		all := t.names(x.cl, k)
		if len(all) == 0 {
			x.subReply(kind, nil, shard)
			return
		}
		for _, n := range all {
			t.remove(m, list, x.cl, n)
			x.subReply(kind, []byte(n), shard)
		}
		return
	}
	for _, n := range names {
		t.remove(m, list, x.cl, string(n))
		x.subReply(kind, n, shard)
	}
}

// PUBLISH channel message: to this node's subscribers, and in cluster
// mode to every other node's; the reply counts this node's receivers.
func cmdPublish(x *ctx) {
	n := x.s.pubsub.publish(x.args[1], x.args[2])
	if b := x.s.cluster.bus; b != nil {
		b.Publish(x.args[1], x.args[2])
	}
	x.int(n)
}

// SPUBLISH shardchannel message: to this node's shard channel
// subscribers, and in cluster mode to those of the other nodes of its
// shard (the dispatcher sent MOVED unless this node serves the channel's
// slot).
func cmdSPublish(x *ctx) {
	n := x.s.pubsub.publishShard(x.args[1], x.args[2])
	if b := x.s.cluster.bus; b != nil {
		b.SPublish(x.args[1], x.args[2])
	}
	x.int(n)
}

// PUBSUB CHANNELS [pattern]: the channels with a subscriber (pattern
// subscriptions do not count), those matching pattern if given.
func cmdPubsubChannels(x *ctx) {
	listChannels(x, func(t *pubsubTable) map[string]map[*client]struct{} { return t.channels })
}

// PUBSUB NUMSUB [channel ...]: each channel and its number of
// subscribers, a flat array in RESP3 too (as Redis 7.0).
func cmdPubsubNumsub(x *ctx) {
	t := x.s.pubsub
	chans := x.args[2:]
	x.array(2 * len(chans))
	for _, ch := range chans {
		t.mu.RLock()
		n := len(t.channels[string(ch)])
		t.mu.RUnlock()
		x.bulk(ch)
		x.int(int64(n))
	}
}

// PUBSUB NUMPAT: the number of distinct patterns subscribed to.
func cmdPubsubNumpat(x *ctx) {
	t := x.s.pubsub
	t.mu.RLock()
	n := len(t.patterns)
	t.mu.RUnlock()
	x.int(int64(n))
}

// PUBSUB SHARDCHANNELS [pattern]: the shard channels with a subscriber on
// this node, those matching pattern if given.
func cmdPubsubShardChannels(x *ctx) {
	listChannels(x, func(t *pubsubTable) map[string]map[*client]struct{} { return t.shard })
}

// listChannels answers PUBSUB CHANNELS or SHARDCHANNELS [pattern] from the
// table's map of, under its read lock, those channels.
func listChannels(x *ctx, of func(t *pubsubTable) map[string]map[*client]struct{}) {
	if len(x.args) > 3 {
		x.errorReply(errSubcommandSyntax(cstr(x.args[1]), "pubsub"))
		return
	}
	var pat []byte
	if len(x.args) == 3 {
		pat = x.args[2]
	}
	t := x.s.pubsub
	t.mu.RLock()
	var out []string
	for ch := range of(t) {
		if pat == nil || glob.Match(pat, []byte(ch), false) {
			out = append(out, ch)
		}
	}
	t.mu.RUnlock()
	x.array(len(out))
	for _, ch := range out {
		x.bulkStr(ch)
	}
}

// PUBSUB SHARDNUMSUB [shardchannel ...]: each shard channel and its number
// of subscribers on this node.
func cmdPubsubShardNumsub(x *ctx) {
	t := x.s.pubsub
	chans := x.args[2:]
	x.array(2 * len(chans))
	for _, ch := range chans {
		t.mu.RLock()
		n := len(t.shard[string(ch)])
		t.mu.RUnlock()
		x.bulk(ch)
		x.int(int64(n))
	}
}

func cmdPubsubHelp(x *ctx) {
	helpReply(x,
		"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"CHANNELS [<pattern>]",
		"    Return the currently active channels matching a <pattern> (default: '*').",
		"NUMPAT",
		"    Return number of subscriptions to patterns.",
		"NUMSUB [<channel> ...]",
		"    Return the number of subscribers for the specified channels, excluding",
		"    pattern subscriptions(default: no channels).",
		"SHARDCHANNELS [<pattern>]",
		"    Return the currently active shard level channels matching a <pattern> (default: '*').",
		"SHARDNUMSUB [<shardchannel> ...]",
		"    Return the number of subscribers for the specified shard level channel(s)",
		"HELP",
		"    Prints this help.")
}

// pubsubStats returns INFO's pubsub_channels, pubsub_patterns and
// pubsubshard_channels.
func (t *pubsubTable) stats() (channels, patterns, shard int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.channels), len(t.patterns), len(t.shard)
}

// allowedSubscribed reports whether a RESP2 client in subscribed mode may
// run sp (Redis's processCommand: the (S|P)(UN)SUBSCRIBE family, PING,
// QUIT and RESET).
func allowedSubscribed(sp *Spec) bool {
	switch sp.Name {
	case "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe", "ping", "quit", "reset":
		return true
	}
	return false
}
