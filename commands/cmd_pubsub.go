package commands

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/glob"
	"github.com/cellserver/cellserver/resp"
)

// Pub/sub, with Redis 7.0's replies (src/pubsub.c). A client subscribes to
// channels (SUBSCRIBE) and to glob patterns (PSUBSCRIBE); PUBLISH sends
// each subscriber of the channel a message, and each client subscribed to
// a matching pattern a pmessage per pattern, and answers how many were
// sent. Messages reach the subscriber through resp.Conn.Push, which queues
// them without waiting on the subscriber's socket: a slow subscriber never
// blocks a publisher, and one whose queue passes the output buffer limit
// is closed (as Redis's client-output-buffer-limit pubsub class closes
// it). A publisher pushes while holding the table's read lock, so for
// every subscriber the messages of one channel are queued in the order of
// the PUBLISH calls that sent them, and none is sent to a client after its
// UNSUBSCRIBE removed the channel.
//
// In RESP2 a subscribed client may only run (P)SUBSCRIBE, (P)UNSUBSCRIBE,
// PING, QUIT and RESET (Service.dispatch); in RESP3 messages are push
// frames and every command is allowed, as in Redis.

// pubsubTable is the server's subscription registry. It is safe for
// concurrent use.
type pubsubTable struct {
	// active counts the channels and patterns that have a subscriber:
	// while it is 0, PUBLISH returns without taking the lock.
	active atomic.Int64

	mu       sync.RWMutex
	channels map[string]map[*client]struct{} // channel -> subscribers
	patterns map[string]map[*client]struct{} // pattern -> subscribers
}

// subscriptions is a client's part of the registry. chans and pats, in
// subscription order, are guarded by pubsubTable.mu; nChans and nPats are
// their lengths, read by CLIENT LIST and the dispatcher.
type subscriptions struct {
	chans  []string
	pats   []string
	nChans atomic.Int32
	nPats  atomic.Int32
}

func newPubsubTable() *pubsubTable {
	return &pubsubTable{
		channels: make(map[string]map[*client]struct{}),
		patterns: make(map[string]map[*client]struct{}),
	}
}

// subscribed reports whether cl has a channel or pattern subscription
// (Redis's CLIENT_PUBSUB flag).
func (cl *client) subscribed() bool { return cl.subCount() > 0 }

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
	cl.pubsub.nChans.Store(int32(len(cl.pubsub.chans)))
	cl.pubsub.nPats.Store(int32(len(cl.pubsub.pats)))
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
	cl.pubsub.nChans.Store(int32(len(cl.pubsub.chans)))
	cl.pubsub.nPats.Store(int32(len(cl.pubsub.pats)))
	return true
}

// names returns a copy of cl's channels (pats false) or patterns.
func (t *pubsubTable) names(cl *client, pats bool) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if pats {
		return slices.Clone(cl.pubsub.pats)
	}
	return slices.Clone(cl.pubsub.chans)
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
}

// publish sends msg on channel to its subscribers and to the clients of
// the patterns that match it; it returns how many messages it sent.
func (t *pubsubTable) publish(channel, msg []byte) int64 {
	if t.active.Load() == 0 {
		return 0
	}
	var n int64
	var frames [2][]byte // RESP2, RESP3
	t.mu.RLock()
	defer t.mu.RUnlock()
	for cl := range t.channels[string(channel)] {
		p := protoIndex(cl)
		if frames[p] == nil {
			frames[p] = messageFrame(p, nil, channel, msg)
		}
		cl.conn.Push(frames[p])
		n++
	}
	for pat, cls := range t.patterns {
		if !glob.Match([]byte(pat), channel, false) {
			continue
		}
		var pframes [2][]byte
		for cl := range cls {
			p := protoIndex(cl)
			if pframes[p] == nil {
				pframes[p] = messageFrame(p, []byte(pat), channel, msg)
			}
			cl.conn.Push(pframes[p])
			n++
		}
	}
	return n
}

func protoIndex(cl *client) int {
	if cl.resp3() {
		return 1
	}
	return 0
}

// messageFrame encodes a message (pattern nil) or a pmessage: an array in
// RESP2 (proto 0), a push in RESP3 (proto 1).
func messageFrame(proto int, pattern, channel, msg []byte) []byte {
	b := make([]byte, 0, 48+len(pattern)+len(channel)+len(msg))
	p := resp.RESP2
	if proto == 1 {
		p = resp.RESP3
	}
	if pattern == nil {
		b = resp.AppendPushLen(b, p, 3)
		b = appendBulk(b, []byte("message"))
	} else {
		b = resp.AppendPushLen(b, p, 4)
		b = appendBulk(b, []byte("pmessage"))
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
// the client's remaining subscription count.
func (x *ctx) subReply(kind string, name []byte) {
	x.pushLen(3)
	x.bulkStr(kind)
	if name == nil {
		x.null()
	} else {
		x.bulk(name)
	}
	x.int(x.cl.subCount())
}

// SUBSCRIBE channel [channel ...]
func cmdSubscribe(x *ctx) {
	t := x.s.pubsub
	for _, ch := range x.args[1:] {
		t.add(t.channels, &x.cl.pubsub.chans, x.cl, string(ch))
		x.subReply("subscribe", ch)
	}
}

// PSUBSCRIBE pattern [pattern ...]
func cmdPSubscribe(x *ctx) {
	t := x.s.pubsub
	for _, p := range x.args[1:] {
		t.add(t.patterns, &x.cl.pubsub.pats, x.cl, string(p))
		x.subReply("psubscribe", p)
	}
}

// UNSUBSCRIBE [channel ...]: without channels, from every channel, one
// reply each, or a single reply with a null channel when there is none.
func cmdUnsubscribe(x *ctx) { x.unsubscribe(false, "unsubscribe") }

// PUNSUBSCRIBE [pattern ...], as UNSUBSCRIBE for patterns.
func cmdPUnsubscribe(x *ctx) { x.unsubscribe(true, "punsubscribe") }

func (x *ctx) unsubscribe(pats bool, kind string) {
	t := x.s.pubsub
	m, list := t.channels, &x.cl.pubsub.chans
	if pats {
		m, list = t.patterns, &x.cl.pubsub.pats
	}
	names := x.args[1:]
	if len(names) == 0 {
		all := t.names(x.cl, pats)
		if len(all) == 0 {
			x.subReply(kind, nil)
			return
		}
		for _, n := range all {
			t.remove(m, list, x.cl, n)
			x.subReply(kind, []byte(n))
		}
		return
	}
	for _, n := range names {
		t.remove(m, list, x.cl, string(n))
		x.subReply(kind, n)
	}
}

// PUBLISH channel message
func cmdPublish(x *ctx) { x.int(x.s.pubsub.publish(x.args[1], x.args[2])) }

// PUBSUB CHANNELS [pattern]: the channels with a subscriber (pattern
// subscriptions do not count), those matching pattern if given.
func cmdPubsubChannels(x *ctx) {
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
	for ch := range t.channels {
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

// PUBSUB SHARDCHANNELS [pattern] and SHARDNUMSUB [channel ...]: cellserver
// has no shard channels (SSUBSCRIBE), so none is active.
func cmdPubsubShardChannels(x *ctx) {
	if len(x.args) > 3 {
		x.errorReply(errSubcommandSyntax(cstr(x.args[1]), "pubsub"))
		return
	}
	x.array(0)
}

func cmdPubsubShardNumsub(x *ctx) {
	chans := x.args[2:]
	x.array(2 * len(chans))
	for _, ch := range chans {
		x.bulk(ch)
		x.int(0)
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

// pubsubStats returns INFO's pubsub_channels and pubsub_patterns.
func (t *pubsubTable) stats() (channels, patterns int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.channels), len(t.patterns)
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
