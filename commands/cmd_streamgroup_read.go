package commands

import (
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/stream"
	"github.com/tidwall/redcon"
)

// XREADGROUP and XINFO.

// deferred runs body with the reply going to a side buffer and returns
// the bytes it wrote, so that a caller can write a length it learns only
// after the elements (Redis's deferred lengths).
func (x *ctx) deferred(body func()) []byte {
	saved := x.c.Out
	x.c.Out = nil
	body()
	out := x.c.Out
	x.c.Out = saved
	return out
}

// xreadgroupKeys finds XREADGROUP's keys as Redis's xreadGetKeys does:
// the options are walked (BLOCK and COUNT take one argument, GROUP two,
// NOACK none) up to STREAMS, so that a group or consumer named "streams"
// is not taken for the keyword; the keys are the first half of what
// follows it. Anything else before STREAMS is a syntax error: no keys.
func xreadgroupKeys(dst []int, args [][]byte) []int {
	pos := -1
walk:
	for i := 1; i < len(args); i++ {
		switch {
		case eqFold(args[i], "block"), eqFold(args[i], "count"):
			i++
		case eqFold(args[i], "group"):
			i += 2
		case eqFold(args[i], "noack"):
		case eqFold(args[i], "streams"):
			pos = i
			break walk
		default:
			break walk
		}
	}
	n := len(args) - pos - 1
	if pos < 0 || n == 0 || n%2 != 0 {
		return dst
	}
	for j := pos + 1; j < pos+1+n/2; j++ {
		dst = append(dst, j)
	}
	return dst
}

// groupRead is one stream of an XREADGROUP call.
type groupRead struct {
	k  *rkey
	v  *keyspace.Value
	s  *stream.Stream
	g  *stream.Group
	id stream.ID // the ID given; stream.MaxID for ">"
}

// xreadgroupArgs is XREADGROUP's parsed call.
type xreadgroupArgs struct {
	timeout  int64 // ms; -1 without BLOCK
	count    int64 // 0: no limit
	noack    bool
	group    []byte
	consumer []byte
	streams  int // index of the first key
	n        int // number of streams
}

func parseXReadGroup(x *ctx) (a xreadgroupArgs, ok bool) {
	a.timeout = -1
	for i := 1; i < len(x.args); i++ {
		more := len(x.args) - i - 1
		o := x.args[i]
		switch {
		case eqFold(o, "block") && more > 0:
			i++
			t, msg := parseBlockTimeout(x.args[i])
			if msg != noErr {
				x.errorReply(msg)
				return a, false
			}
			a.timeout = t
		case eqFold(o, "count") && more > 0:
			i++
			n, ok := parseRedisInt(x.args[i])
			if !ok {
				x.errorReply(msgNotInt)
				return a, false
			}
			a.count = max(n, 0)
		case eqFold(o, "streams") && more > 0:
			a.streams = i + 1
			n := len(x.args) - a.streams
			if n%2 != 0 {
				x.errorReply(msgXreadUnbalanced)
				return a, false
			}
			a.n = n / 2
			i = len(x.args)
		case eqFold(o, "group") && more >= 2:
			a.group, a.consumer = x.args[i+1], x.args[i+2]
			i += 2
		case eqFold(o, "noack"):
			a.noack = true
		default:
			x.errorReply(msgSyntax)
			return a, false
		}
	}
	if a.streams == 0 {
		x.errorReply(msgSyntax)
		return a, false
	}
	if a.group == nil {
		x.errorReply(msgXReadGroupNoGroup)
		return a, false
	}
	// The keys locked (x.keys, xreadgroupKeys) must be the ones parsed.
	if len(x.keys) != a.n {
		x.errorReply(msgSyntax)
		return a, false
	}
	for i := range x.keys {
		if string(x.keys[i].key) != string(x.args[a.streams+i]) {
			x.errorReply(msgSyntax)
			return a, false
		}
	}
	return a, true
}

// XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK]
// STREAMS key [key ...] id [id ...]
func cmdXReadGroup(x *ctx) {
	a, ok := parseXReadGroup(x)
	if !ok {
		return
	}
	now := x.clockMS()
	reads := make([]groupRead, a.n)
	for i := range reads {
		r := &reads[i]
		r.k = &x.keys[i]
		if r.v, r.s, ok = groupStream(x, r.k); !ok {
			return
		}
		if r.s != nil {
			r.g = r.s.Group(string(a.group))
		}
		if r.g == nil {
			x.errorReply(errNoGroupRead(x.args[a.streams+i], a.group))
			return
		}
		arg := x.args[a.streams+a.n+i]
		switch string(arg) {
		case "$":
			x.errorReply(msgXReadGroupDollar)
			return
		case ">":
			r.id = stream.MaxID
		default:
			if r.id, ok = parseGroupID(arg, 0, true); !ok {
				x.errorReply(msgStreamID)
				return
			}
		}
	}
	if serveGroupReads(x, &a, reads, now) {
		return
	}
	if a.timeout == -1 || x.inExec {
		// No BLOCK, or inside MULTI (Redis's CLIENT_DENY_BLOCKING): as
		// if the timeout had passed.
		x.nullArray()
		return
	}
	count := a.count
	if count == 0 {
		count = xreadBlockedCount
	}
	keys := make([]rkey, a.n)
	copy(keys, x.keys[:a.n])
	try := groupReadTry(x, string(a.group), string(a.consumer), count, a.noack)
	if !x.blockOnKeys(keys, a.timeout, try, resp.AppendNullArray(nil, x.proto())) {
		x.errorReply(msgTooManyBlocked)
	}
}

// groupReadTry is a blocked XREADGROUP's test, run when one of its keys
// changed, as Redis 7.0.15's serveClientsBlockedOnStreamKey: answered
// with -UNBLOCKED when the key is gone or holds another kind, -NOGROUP
// when the group is, else served once the stream's last ID passes the
// group's last delivered ID (the reply names that key alone). An error
// counts in INFO's errorstats and as a failed call, as Redis counts the
// blocked command's.
func groupReadTry(x *ctx, group, consumer string, count int64, noack bool) keyTry {
	p, svc, sp, shard := x.proto(), x.s, x.spec, x.cl.shard
	fail := func(msg string) ([]byte, bool) {
		svc.countError(msg)
		sp.stats.failed.Add(shard, 1)
		return []byte("-" + msg + "\r\n"), true
	}
	return func(key []byte, sh *keyspace.Shard, v *keyspace.Value, now int64) ([]byte, bool) {
		if v == nil || v.Kind != keyspace.KindStream {
			return fail(msgUnblockedNoKey)
		}
		s := v.Obj.(*stream.Stream)
		g := s.Group(group)
		if g == nil {
			return fail(msgUnblockedNoGroup)
		}
		if !g.LastID.Less(s.LastID()) {
			return nil, false
		}
		c := g.Consumer(consumer)
		if c == nil {
			c = s.CreateConsumer(g, consumer, now)
		} else {
			s.TouchConsumer(c, now)
		}
		var out []byte
		if p == resp.RESP2 {
			out = redcon.AppendArray(out, 1)
			out = redcon.AppendArray(out, 2)
		} else {
			out = resp.AppendMapLen(out, p, 1)
		}
		out = redcon.AppendBulk(out, key)
		start, _ := g.LastID.Incr()
		var ids []stream.ID
		var entries []byte
		s.Range(start, stream.MaxID, false, func(e stream.Entry) bool {
			entries = appendStreamEntry(entries, e.ID, e.Fields)
			ids = append(ids, e.ID)
			return int64(len(ids)) < count
		})
		out = redcon.AppendArray(out, len(ids))
		out = append(out, entries...)
		for _, id := range ids {
			s.Deliver(g, id)
			if !noack {
				s.SetPending(g, id, c, now, 1)
			}
		}
		sh.Changed(key, v)
		return out, true
	}
}

// appendStreamEntry appends one entry as streamEntryReply writes it.
func appendStreamEntry(dst []byte, id stream.ID, fields [][]byte) []byte {
	var b [42]byte
	dst = redcon.AppendArray(dst, 2)
	dst = redcon.AppendBulk(dst, id.AppendText(b[:0]))
	dst = redcon.AppendArray(dst, len(fields))
	for _, f := range fields {
		dst = redcon.AppendBulk(dst, f)
	}
	return dst
}

// serveGroupReads answers the streams that have something to serve (as
// xreadCommand's synchronous part) and reports whether it answered.
func serveGroupReads(x *ctx, a *xreadgroupArgs, reads []groupRead, now int64) bool {
	served := 0
	body := x.deferred(func() {
		for i := range reads {
			r := &reads[i]
			if r.s == nil {
				continue
			}
			history := r.id != stream.MaxID
			start := r.id
			if !history {
				last, ok := r.s.LastEntryID()
				if r.s.Len() == 0 || !ok || !r.g.LastID.Less(last) {
					continue
				}
				start = r.g.LastID
			}
			if next, ok := start.Incr(); ok {
				start = next
			} else {
				start = stream.ID{}
			}
			served++
			if x.proto() == resp.RESP2 {
				x.array(2)
			}
			x.bulk(x.args[a.streams+i])
			c := r.g.Consumer(string(a.consumer))
			if c == nil {
				c = r.s.CreateConsumer(r.g, string(a.consumer), now)
			} else {
				r.s.TouchConsumer(c, now)
			}
			if history {
				serveHistory(x, r, c, start, a.count, now)
			} else {
				serveNew(x, r, c, start, a.count, a.noack, now)
			}
			r.k.sh.Changed(r.k.key, r.v)
		}
	})
	if served == 0 {
		return false
	}
	if x.proto() == resp.RESP2 {
		x.array(served)
	} else {
		x.mapLen(served)
	}
	x.c.Out = append(x.c.Out, body...)
	return true
}

// serveHistory answers the consumer's pending entries from start
// (streamReplyWithRangeFromConsumerPEL): a deleted entry as its ID and a
// null, a live one counted as delivered again.
func serveHistory(x *ctx, r *groupRead, c *stream.Consumer, start stream.ID, count int64, now int64) {
	var ids []stream.ID
	c.RangePending(start, stream.MaxID, func(p *stream.Pending) bool {
		ids = append(ids, p.ID)
		return count == 0 || int64(len(ids)) < count
	})
	x.array(len(ids))
	for _, id := range ids {
		if !x.c.Reserve(0) {
			return // past the output buffer limit: the connection closes
		}
		fields, ok := r.s.Get(id)
		if !ok {
			x.array(2)
			x.streamIDReply(id)
			x.nullArray()
			continue
		}
		x.streamEntryReply(id, fields)
		p := r.g.Pending(id)
		r.s.SetPending(r.g, id, c, now, p.DeliveryCount+1)
	}
}

// serveNew answers the entries after the group's last delivered ID,
// moving it and (without NOACK) adding them to the consumer's PEL.
func serveNew(x *ctx, r *groupRead, c *stream.Consumer, start stream.ID, count int64, noack bool, now int64) {
	var ids []stream.ID
	entries := x.deferred(func() {
		r.s.Range(start, stream.MaxID, false, func(e stream.Entry) bool {
			if !x.c.Reserve(0) {
				// Past the output buffer limit (the reply built so far
				// is Out): the connection closes; what was delivered
				// stays pending, for another read or XAUTOCLAIM.
				return false
			}
			x.streamEntryReply(e.ID, e.Fields)
			ids = append(ids, e.ID)
			return count == 0 || int64(len(ids)) < count
		})
	})
	x.array(len(ids))
	x.c.Out = append(x.c.Out, entries...)
	for _, id := range ids {
		r.s.Deliver(r.g, id)
		if !noack {
			r.s.SetPending(r.g, id, c, now, 1)
		}
	}
}

// ---- XINFO ----

func cmdXInfoHelp(x *ctx) {
	helpReply(x,
		"XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"CONSUMERS <key> <groupname>",
		"    Show consumers of <groupname>.",
		"GROUPS <key>",
		"    Show the stream consumer groups.",
		"STREAM <key> [FULL [COUNT <count>]",
		"    Show information about the stream.",
		"HELP",
		"    Prints this help.")
}

// xinfoStream returns the key's stream, or answers "no such key" or
// WRONGTYPE.
func xinfoStream(x *ctx) (*stream.Stream, int64, bool) {
	now := x.clockMS()
	v := x.keys[0].lookup(now)
	if v == nil {
		x.errorReply(msgNoSuchKey)
		return nil, now, false
	}
	if v.Kind != keyspace.KindStream {
		x.errorReply(msgWrongType)
		return nil, now, false
	}
	return v.Obj.(*stream.Stream), now, true
}

// XINFO CONSUMERS key group
func cmdXInfoConsumers(x *ctx) {
	s, now, ok := xinfoStream(x)
	if !ok {
		return
	}
	g := s.Group(string(x.args[3]))
	if g == nil {
		x.errorReply(errNoGroupFor(x.args[3], x.args[2]))
		return
	}
	x.array(g.ConsumerCount())
	g.RangeConsumers(func(c *stream.Consumer) bool {
		if !x.c.Reserve(0) {
			return false // past the output buffer limit: the connection closes
		}
		x.mapLen(3)
		x.bulkStr("name")
		x.bulkStr(c.Name)
		x.bulkStr("pending")
		x.int(int64(c.PendingCount()))
		x.bulkStr("idle")
		x.int(max(now-c.SeenTime, 0))
		return true
	})
}

// lagReply writes g's lag, or a null when it is not known.
func (x *ctx) lagReply(s *stream.Stream, g *stream.Group) {
	if lag, ok := s.Lag(g); ok {
		x.int(lag)
	} else {
		x.null()
	}
}

func (x *ctx) entriesReadReply(g *stream.Group) {
	if g.EntriesRead != stream.Invalid {
		x.int(g.EntriesRead)
	} else {
		x.null()
	}
}

// XINFO GROUPS key
func cmdXInfoGroups(x *ctx) {
	s, _, ok := xinfoStream(x)
	if !ok {
		return
	}
	x.array(s.GroupCount())
	s.RangeGroups(func(g *stream.Group) bool {
		if !x.c.Reserve(0) {
			return false // past the output buffer limit: the connection closes
		}
		x.mapLen(6)
		x.bulkStr("name")
		x.bulkStr(g.Name)
		x.bulkStr("consumers")
		x.int(int64(g.ConsumerCount()))
		x.bulkStr("pending")
		x.int(int64(g.PendingCount()))
		x.bulkStr("last-delivered-id")
		x.streamIDReply(g.LastID)
		x.bulkStr("entries-read")
		x.entriesReadReply(g)
		x.bulkStr("lag")
		x.lagReply(s, g)
		return true
	})
}

// XINFO STREAM key [FULL [COUNT count]]
func cmdXInfoStream(x *ctx) {
	s, _, ok := xinfoStream(x)
	if !ok {
		return
	}
	full := false
	count := int64(10)
	switch opts := x.args[3:]; len(opts) {
	case 0:
	case 1, 3:
		if !eqFold(opts[0], "full") || (len(opts) == 3 && !eqFold(opts[1], "count")) {
			x.errorReply(errSubcommandSyntax(string(x.args[1]), "xinfo"))
			return
		}
		full = true
		if len(opts) == 3 {
			if count, ok = parseRedisInt(opts[2]); !ok {
				x.errorReply(msgNotInt)
				return
			}
			if count < 0 {
				count = 10
			}
		}
	default:
		x.errorReply(errSubcommandSyntax(string(x.args[1]), "xinfo"))
		return
	}
	if full {
		x.mapLen(9)
	} else {
		x.mapLen(10)
	}
	x.bulkStr("length")
	x.int(int64(s.Len()))
	x.bulkStr("radix-tree-keys")
	x.int(int64(s.Nodes()))
	x.bulkStr("radix-tree-nodes")
	x.int(s.RaxNodes())
	x.bulkStr("last-generated-id")
	x.streamIDReply(s.LastID())
	x.bulkStr("max-deleted-entry-id")
	x.streamIDReply(s.MaxDeletedID())
	x.bulkStr("entries-added")
	x.int(int64(s.EntriesAdded()))
	x.bulkStr("recorded-first-entry-id")
	first, _ := s.FirstID()
	x.streamIDReply(first)
	if !full {
		x.bulkStr("groups")
		x.int(int64(s.GroupCount()))
		for _, rev := range []bool{false, true} {
			if rev {
				x.bulkStr("last-entry")
			} else {
				x.bulkStr("first-entry")
			}
			found := false
			s.Range(stream.ID{}, stream.MaxID, rev, func(e stream.Entry) bool {
				x.streamEntryReply(e.ID, e.Fields)
				found = true
				return false
			})
			if !found {
				x.null()
			}
		}
		return
	}
	x.bulkStr("entries")
	n := 0
	entries := x.deferred(func() {
		s.Range(stream.ID{}, stream.MaxID, false, func(e stream.Entry) bool {
			if !x.c.Reserve(0) {
				return false // past the output buffer limit: the connection closes
			}
			x.streamEntryReply(e.ID, e.Fields)
			n++
			return count == 0 || int64(n) < count
		})
	})
	x.array(n)
	x.c.Out = append(x.c.Out, entries...)
	x.bulkStr("groups")
	x.array(s.GroupCount())
	s.RangeGroups(func(g *stream.Group) bool {
		x.mapLen(7)
		x.bulkStr("name")
		x.bulkStr(g.Name)
		x.bulkStr("last-delivered-id")
		x.streamIDReply(g.LastID)
		x.bulkStr("entries-read")
		x.entriesReadReply(g)
		x.bulkStr("lag")
		x.lagReply(s, g)
		x.bulkStr("pel-count")
		x.int(int64(g.PendingCount()))
		x.bulkStr("pending")
		x.array(limitCount(g.PendingCount(), count))
		i := 0
		g.RangePending(stream.ID{}, stream.MaxID, func(p *stream.Pending) bool {
			if count != 0 && int64(i) >= count || !x.c.Reserve(0) {
				return false
			}
			i++
			x.array(4)
			x.streamIDReply(p.ID)
			x.bulkStr(p.Consumer.Name)
			x.int(p.DeliveryTime)
			x.int(int64(p.DeliveryCount))
			return true
		})
		x.bulkStr("consumers")
		x.array(g.ConsumerCount())
		g.RangeConsumers(func(c *stream.Consumer) bool {
			x.mapLen(4)
			x.bulkStr("name")
			x.bulkStr(c.Name)
			x.bulkStr("seen-time")
			x.int(c.SeenTime)
			x.bulkStr("pel-count")
			x.int(int64(c.PendingCount()))
			x.bulkStr("pending")
			x.array(limitCount(c.PendingCount(), count))
			i := 0
			c.RangePending(stream.ID{}, stream.MaxID, func(p *stream.Pending) bool {
				if count != 0 && int64(i) >= count || !x.c.Reserve(0) {
					return false
				}
				i++
				x.array(3)
				x.streamIDReply(p.ID)
				x.int(p.DeliveryTime)
				x.int(int64(p.DeliveryCount))
				return true
			})
			return true
		})
		return true
	})
}

// limitCount is min(n, count), count 0 meaning no limit.
func limitCount(n int, count int64) int {
	if count != 0 && int64(n) > count {
		return int(count)
	}
	return n
}
