package commands

import (
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/stream"
)

// Consumer groups: XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM
// and XINFO, as Redis 7.0.15's t_stream.c answers them. The groups live in
// the stream value (stream.Stream, changed in place under the key's shard
// lock); a command that changed one calls Shard.Changed once, so that the
// journal (persistence, replicas) receives the stream's delta and WATCH
// and client tracking see the change. Every time (delivery times, seen
// times, idle times) comes from the command's clock, x.clockMS().

// groupStream looks up k's stream (lookupStream): v nil when the key is
// missing; ok false (WRONGTYPE answered) when it holds another kind.
func groupStream(x *ctx, k *rkey) (v *keyspace.Value, s *stream.Stream, ok bool) {
	v, s, msg := x.lookupStream(k)
	if msg != noErr {
		x.errorReply(msg)
		return nil, nil, false
	}
	return v, s, true
}

// parseGroupID is parseStreamID without XADD's <ms>-* form.
func parseGroupID(arg []byte, missingSeq uint64, strict bool) (stream.ID, bool) {
	id, _, ok := parseStreamID(arg, missingSeq, strict, false)
	return id, ok
}

// parseGroupInterval is parseInterval, its error being msgStreamID.
func parseGroupInterval(arg []byte, missingSeq uint64) (id stream.ID, exclude, ok bool) {
	id, exclude, msg := parseInterval(arg, missingSeq)
	return id, exclude, msg == noErr
}

// streamIDReply writes id as a bulk string.
func (x *ctx) streamIDReply(id stream.ID) {
	var b [42]byte
	x.bulk(id.AppendText(b[:0]))
}

// streamEntryReply writes one entry: its ID and its fields and values.
func (x *ctx) streamEntryReply(id stream.ID, fields [][]byte) {
	x.array(2)
	x.streamIDReply(id)
	x.array(len(fields))
	for _, f := range fields {
		x.bulk(f)
	}
}

func errNoGroupKey(key, group []byte) wireErr {
	return wireErr("NOGROUP No such key '" + cstr(key) + "' or consumer group '" + cstr(group) + "'")
}

func errNoGroupFor(group, key []byte) wireErr {
	return wireErr("NOGROUP No such consumer group '" + cstr(group) + "' for key name '" + cstr(key) + "'")
}

func errNoGroupRead(key, group []byte) wireErr {
	return wireErr("NOGROUP No such key '" + cstr(key) + "' or consumer group '" + cstr(group) +
		"' in XREADGROUP with GROUP option")
}

// ---- XGROUP ----

func cmdXGroupHelp(x *ctx) {
	helpReply(x,
		"XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"CREATE <key> <groupname> <id|$> [option]",
		"    Create a new consumer group. Options are:",
		"    * MKSTREAM",
		"      Create the empty stream if it does not exist.",
		"    * ENTRIESREAD entries_read",
		"      Set the group's entries_read counter (internal use).",
		"CREATECONSUMER <key> <groupname> <consumer>",
		"    Create a new consumer in the specified group.",
		"DELCONSUMER <key> <groupname> <consumer>",
		"    Remove the specified consumer.",
		"DESTROY <key> <groupname>",
		"    Remove the specified group.",
		"SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
		"    Set the current group ID and entries_read counter.",
		"HELP",
		"    Prints this help.")
}

// xgroupPrologue is what xgroupCommand does before dispatching: parse
// CREATE's and SETID's options, look the key up, and check the key and
// (for SETID, CREATECONSUMER, DELCONSUMER) the group exist. ok false: an
// error was answered.
type xgroupArgs struct {
	v           *keyspace.Value
	s           *stream.Stream
	g           *stream.Group
	mkstream    bool
	entriesRead int64
}

func xgroupPrologue(x *ctx, sub string) (a xgroupArgs, ok bool) {
	a.entriesRead = stream.Invalid
	create, setid := sub == "create", sub == "setid"
	for i := 5; i < len(x.args); {
		switch {
		case create && eqFold(x.args[i], "mkstream"):
			a.mkstream = true
			i++
		case (create || setid) && eqFold(x.args[i], "entriesread") && i+1 < len(x.args):
			n, ok := parseRedisInt(x.args[i+1])
			if !ok {
				x.errorReply(msgNotInt)
				return a, false
			}
			if n < 0 && n != stream.Invalid {
				x.errorReply(msgEntriesReadNeg)
				return a, false
			}
			a.entriesRead = n
			i += 2
		default:
			x.errorReply(errSubcommandSyntax(string(x.args[1]), "xgroup"))
			return a, false
		}
	}
	v, s, ok := groupStream(x, &x.keys[0])
	if !ok {
		return a, false
	}
	a.v, a.s = v, s
	if a.mkstream {
		return a, true
	}
	if s == nil {
		x.errorReply(msgXGroupNoKey)
		return a, false
	}
	a.g = s.Group(string(x.args[3]))
	if a.g == nil && sub != "create" && sub != "destroy" {
		x.errorReply(errNoGroupFor(x.args[3], x.args[2]))
		return a, false
	}
	return a, true
}

// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]
func cmdXGroupCreate(x *ctx) {
	if !x.s.ks.CanInsert() {
		x.oom()
		return
	}
	a, ok := xgroupPrologue(x, "create")
	if !ok {
		return
	}
	if len(x.args) > 8 {
		x.errorReply(errSubcommandSyntax(string(x.args[1]), "xgroup"))
		return
	}
	var id stream.ID
	if string(x.args[4]) == "$" {
		if a.s != nil {
			id = a.s.LastID()
		}
	} else if id, ok = parseGroupID(x.args[4], 0, true); !ok {
		x.errorReply(msgStreamID)
		return
	}
	k := &x.keys[0]
	if a.s == nil {
		a.s = stream.New()
		a.s.CreateGroup(string(x.args[3]), id, a.entriesRead)
		k.replace(nil, keyspace.Value{Kind: keyspace.KindStream, Obj: a.s})
		x.ok()
		return
	}
	if a.s.CreateGroup(string(x.args[3]), id, a.entriesRead) == nil {
		x.errorReply(msgBusyGroup)
		return
	}
	k.sh.Changed(k.key, a.v)
	x.ok()
}

// XGROUP SETID key group id|$ [ENTRIESREAD n]
func cmdXGroupSetID(x *ctx) {
	if len(x.args) != 5 && len(x.args) != 7 {
		// Redis parses the options first: ENTRIESREAD's errors win.
		if _, ok := xgroupPrologue(x, "setid"); ok {
			x.errorReply(errSubcommandSyntax(string(x.args[1]), "xgroup"))
		}
		return
	}
	a, ok := xgroupPrologue(x, "setid")
	if !ok {
		return
	}
	var id stream.ID
	if string(x.args[4]) == "$" {
		id = a.s.LastID()
	} else if id, ok = parseGroupID(x.args[4], 0, false); !ok {
		x.errorReply(msgStreamID)
		return
	}
	a.s.SetGroupLast(a.g, id, a.entriesRead)
	k := &x.keys[0]
	k.sh.Changed(k.key, a.v)
	x.ok()
}

// XGROUP DESTROY key group
func cmdXGroupDestroy(x *ctx) {
	a, ok := xgroupPrologue(x, "destroy")
	if !ok {
		return
	}
	if a.g == nil {
		x.int(0)
		return
	}
	a.s.DestroyGroup(a.g)
	k := &x.keys[0]
	k.sh.Changed(k.key, a.v)
	x.wakeStream(k) // its blocked XREADGROUP readers answer -NOGROUP
	x.int(1)
}

// XGROUP CREATECONSUMER key group consumer
func cmdXGroupCreateConsumer(x *ctx) {
	if !x.s.ks.CanInsert() {
		x.oom()
		return
	}
	a, ok := xgroupPrologue(x, "createconsumer")
	if !ok {
		return
	}
	if a.s.CreateConsumer(a.g, string(x.args[4]), x.clockMS()) == nil {
		x.int(0)
		return
	}
	k := &x.keys[0]
	k.sh.Changed(k.key, a.v)
	x.int(1)
}

// XGROUP DELCONSUMER key group consumer
func cmdXGroupDelConsumer(x *ctx) {
	a, ok := xgroupPrologue(x, "delconsumer")
	if !ok {
		return
	}
	c := a.g.Consumer(string(x.args[4]))
	if c == nil {
		x.int(0)
		return
	}
	n := a.s.DeleteConsumer(c)
	k := &x.keys[0]
	k.sh.Changed(k.key, a.v)
	x.int(int64(n))
}

// ---- XACK ----

// XACK key group id [id ...]
func cmdXAck(x *ctx) {
	k := &x.keys[0]
	v, s, ok := groupStream(x, k)
	if !ok {
		return
	}
	var g *stream.Group
	if s != nil {
		g = s.Group(string(x.args[2]))
	}
	if g == nil {
		x.int(0)
		return
	}
	ids := make([]stream.ID, len(x.args)-3)
	for i, a := range x.args[3:] {
		if ids[i], ok = parseGroupID(a, 0, true); !ok {
			x.errorReply(msgStreamID)
			return
		}
	}
	n := 0
	for _, id := range ids {
		if s.Ack(g, id) {
			n++
		}
	}
	if n > 0 {
		k.sh.Changed(k.key, v)
	}
	x.int(int64(n))
}

// ---- XPENDING ----

// XPENDING key group [[IDLE min-idle] start end count [consumer]]
func cmdXPending(x *ctx) {
	n := len(x.args)
	if n != 3 && (n < 6 || n > 9) {
		x.errorReply(msgSyntax)
		return
	}
	var (
		start, end stream.ID
		count      int64
		minIdle    int64
		consumer   []byte
	)
	if n >= 6 {
		si := 3
		if eqFold(x.args[3], "idle") {
			var ok bool
			if minIdle, ok = parseRedisInt(x.args[4]); !ok {
				x.errorReply(msgNotInt)
				return
			}
			if n < 8 {
				x.errorReply(msgSyntax)
				return
			}
			si += 2
		}
		var ok, ex bool
		if count, ok = parseRedisInt(x.args[si+2]); !ok {
			x.errorReply(msgNotInt)
			return
		}
		count = max(count, 0)
		if start, ex, ok = parseGroupInterval(x.args[si], 0); !ok {
			x.errorReply(msgStreamID)
			return
		}
		if ex {
			if start, ok = start.Incr(); !ok {
				x.errorReply(msgStreamStartInterval)
				return
			}
		}
		if end, ex, ok = parseGroupInterval(x.args[si+1], ^uint64(0)); !ok {
			x.errorReply(msgStreamID)
			return
		}
		if ex {
			if end, ok = end.Decr(); !ok {
				x.errorReply(msgStreamEndInterval)
				return
			}
		}
		if si+3 < n {
			consumer = x.args[si+3]
		}
	}
	now := x.clockMS()
	_, s, ok := groupStream(x, &x.keys[0])
	if !ok {
		return
	}
	var g *stream.Group
	if s != nil {
		g = s.Group(string(x.args[2]))
	}
	if g == nil {
		x.errorReply(errNoGroupKey(x.args[1], x.args[2]))
		return
	}
	if n == 3 {
		x.array(4)
		x.int(int64(g.PendingCount()))
		if g.PendingCount() == 0 {
			x.null()
			x.null()
			x.nullArray()
			return
		}
		x.streamIDReply(g.FirstPending().ID)
		x.streamIDReply(g.LastPending().ID)
		owners := 0
		g.RangeConsumers(func(c *stream.Consumer) bool {
			if c.PendingCount() > 0 {
				owners++
			}
			return true
		})
		x.array(owners)
		g.RangeConsumers(func(c *stream.Consumer) bool {
			if !x.c.Reserve(0) {
				return false // past the output buffer limit: the connection closes
			}
			if c.PendingCount() > 0 {
				x.array(2)
				x.bulkStr(c.Name)
				x.bulkInt(int64(c.PendingCount()))
			}
			return true
		})
		return
	}
	rng := g.RangePending
	if consumer != nil {
		c := g.Consumer(string(consumer))
		if c == nil {
			x.array(0)
			return
		}
		rng = c.RangePending
	}
	var found []*stream.Pending
	if count > 0 {
		rng(start, end, func(p *stream.Pending) bool {
			if minIdle != 0 && now-p.DeliveryTime < minIdle {
				return true
			}
			found = append(found, p)
			return int64(len(found)) < count
		})
	}
	x.array(len(found))
	for _, p := range found {
		if !x.c.Reserve(0) {
			return // past the output buffer limit: the connection closes
		}
		x.array(4)
		x.streamIDReply(p.ID)
		x.bulkStr(p.Consumer.Name)
		x.int(max(now-p.DeliveryTime, 0))
		x.int(int64(p.DeliveryCount))
	}
}

// ---- XCLAIM ----

// optInt reads the integer after the option at *j (moving *j onto it),
// answering msg if it is not one.
func optInt(x *ctx, j *int, msg wireErr) (int64, bool) {
	*j++
	n, ok := parseRedisInt(x.args[*j])
	if !ok {
		x.errorReply(msg)
	}
	return n, ok
}

// claimGroup is XCLAIM's and XAUTOCLAIM's lookup: k's stream and the
// group named by the second argument, or false once the error (WRONGTYPE,
// NOGROUP) is answered.
func claimGroup(x *ctx, k *rkey) (*keyspace.Value, *stream.Stream, *stream.Group, bool) {
	v, s, ok := groupStream(x, k)
	if !ok {
		return nil, nil, nil, false
	}
	var g *stream.Group
	if s != nil {
		g = s.Group(string(x.args[2]))
	}
	if g == nil {
		x.errorReply(errNoGroupKey(x.args[1], x.args[2]))
		return nil, nil, nil, false
	}
	return v, s, g, true
}

// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME
// ms-unix-time] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]
func cmdXClaim(x *ctx) {
	k := &x.keys[0]
	now := x.clockMS()
	v, s, g, ok := claimGroup(x, k)
	if !ok {
		return
	}
	minIdle, ok := parseRedisInt(x.args[4])
	if !ok {
		x.errorReply(msgXClaimMinIdle)
		return
	}
	minIdle = max(minIdle, 0)
	var ids []stream.ID
	j := 5
	for ; j < len(x.args); j++ {
		id, ok := parseGroupID(x.args[j], 0, true)
		if !ok {
			break
		}
		ids = append(ids, id)
	}
	var (
		retry         = int64(-1)
		delivery      = int64(-1)
		force, justID bool
		lastID        stream.ID
	)
	for ; j < len(x.args); j++ {
		more := len(x.args) - 1 - j
		opt := x.args[j]
		switch {
		case eqFold(opt, "force"):
			force = true
		case eqFold(opt, "justid"):
			justID = true
		case eqFold(opt, "idle") && more > 0:
			n, ok := optInt(x, &j, msgXClaimIdle)
			if !ok {
				return
			}
			delivery = now - n
		case eqFold(opt, "time") && more > 0:
			n, ok := optInt(x, &j, msgXClaimTime)
			if !ok {
				return
			}
			delivery = n
		case eqFold(opt, "retrycount") && more > 0:
			n, ok := optInt(x, &j, msgXClaimRetry)
			if !ok {
				return
			}
			retry = n
		case eqFold(opt, "lastid") && more > 0:
			j++
			id, ok := parseGroupID(x.args[j], 0, true)
			if !ok {
				x.errorReply(msgStreamID)
				return
			}
			lastID = id
		default:
			x.errorReply(wireErr("ERR Unrecognized XCLAIM option '" + cstr(opt) + "'"))
			return
		}
	}
	changed := false
	if g.LastID.Less(lastID) {
		s.SetGroupLast(g, lastID, g.EntriesRead)
		changed = true
	}
	if delivery == -1 || delivery < 0 || delivery > now {
		delivery = now
	}
	name := string(x.args[3])
	var c *stream.Consumer
	type claimed struct {
		id     stream.ID
		fields [][]byte
	}
	var out []claimed
	held := 0 // bytes of the claimed entries' fields copied for the reply
	for _, id := range ids {
		if !x.c.Reserve(held) {
			break // past the output buffer limit: the connection closes
		}
		p := g.Pending(id)
		fields, exists := s.Get(id)
		if !exists {
			if p != nil {
				s.Ack(g, id)
				changed = true
			}
			continue
		}
		if p == nil && !force {
			continue
		}
		if p != nil && minIdle != 0 && now-p.DeliveryTime < minIdle {
			continue
		}
		if c == nil {
			c = claimConsumer(s, g, name, now)
		}
		cnt := uint64(1) // a forced new entry: Redis's NACK starts at 1
		if p != nil {
			cnt = p.DeliveryCount
			if retry < 0 && !justID {
				cnt++
			}
		} else if !justID && retry < 0 {
			cnt = 2
		}
		if retry >= 0 {
			cnt = uint64(retry)
		}
		s.SetPending(g, id, c, delivery, cnt)
		changed = true
		if justID {
			out = append(out, claimed{id: id})
			continue
		}
		out = append(out, claimed{id, cloneFields(fields)})
		for _, b := range fields {
			held += len(b) + 16
		}
	}
	if changed {
		k.sh.Changed(k.key, v)
	}
	x.array(len(out))
	for _, e := range out {
		if justID {
			x.streamIDReply(e.id)
		} else {
			x.streamEntryReply(e.id, e.fields)
		}
	}
}

// claimConsumer is XCLAIM's and XAUTOCLAIM's consumer: looked up (its
// seen time refreshed) or created.
func claimConsumer(s *stream.Stream, g *stream.Group, name string, now int64) *stream.Consumer {
	if c := g.Consumer(name); c != nil {
		s.TouchConsumer(c, now)
		return c
	}
	return s.CreateConsumer(g, name, now)
}

// ---- XAUTOCLAIM ----

// xautoclaimMaxCount is Redis's bound on COUNT: LONG_MAX / 10 (the
// attempts factor).
const xautoclaimMaxCount = (1<<63 - 1) / 10

// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]
func cmdXAutoClaim(x *ctx) {
	minIdle, ok := parseRedisInt(x.args[4])
	if !ok {
		x.errorReply(msgXAutoClaimMinIdle)
		return
	}
	minIdle = max(minIdle, 0)
	start, ex, ok := parseGroupInterval(x.args[5], 0)
	if !ok {
		x.errorReply(msgStreamID)
		return
	}
	if ex {
		if start, ok = start.Incr(); !ok {
			x.errorReply(msgStreamStartInterval)
			return
		}
	}
	count := int64(100)
	justID := false
	for j := 6; j < len(x.args); j++ {
		more := len(x.args) - 1 - j
		switch {
		case eqFold(x.args[j], "count") && more > 0:
			n, ok := parseRedisInt(x.args[j+1])
			if !ok {
				x.errorReply(msgXAutoClaimCount)
				return
			}
			if n < 1 || n > xautoclaimMaxCount {
				x.errorReply(msgXAutoClaimCount)
				return
			}
			count = n
			j++
		case eqFold(x.args[j], "justid"):
			justID = true
		default:
			x.errorReply(msgSyntax)
			return
		}
	}
	k := &x.keys[0]
	now := x.clockMS()
	v, s, g, ok := claimGroup(x, k)
	if !ok {
		return
	}
	name := string(x.args[3])
	var (
		c        *stream.Consumer
		claimed  []stream.ID
		fields   [][][]byte
		deleted  []stream.ID
		cur      = start
		attempts = count * 10
		eof      bool
	)
	// The PEL is walked with a cursor (each step O(log n)), as Redis
	// seeks its rax again after removing an entry.
	next := func() *stream.Pending {
		var found *stream.Pending
		g.RangePending(cur, stream.MaxID, func(p *stream.Pending) bool {
			found = p
			return false
		})
		return found
	}
	held := 0 // bytes of the claimed entries' fields copied for the reply
	for attempts > 0 && count > 0 {
		attempts--
		if !x.c.Reserve(held) {
			break // past the output buffer limit: the connection closes
		}
		p := next()
		if p == nil {
			eof = true
			break
		}
		id := p.ID
		nextCur, more := id.Incr()
		f, exists := s.Get(id)
		switch {
		case !exists:
			s.Ack(g, id)
			deleted = append(deleted, id)
			count--
		case minIdle != 0 && now-p.DeliveryTime < minIdle:
		default:
			if c == nil {
				c = claimConsumer(s, g, name, now)
			}
			cnt := p.DeliveryCount
			if !justID {
				cnt++
			}
			s.SetPending(g, id, c, now, cnt)
			claimed = append(claimed, id)
			if !justID {
				fields = append(fields, cloneFields(f))
				for _, b := range f {
					held += len(b) + 16
				}
			}
			count--
		}
		if !more {
			eof = true
			break
		}
		cur = nextCur
	}
	var endID stream.ID
	if !eof {
		if p := next(); p != nil {
			endID = p.ID
		}
	}
	if len(claimed) > 0 || len(deleted) > 0 || c != nil {
		k.sh.Changed(k.key, v)
	}
	x.array(3)
	x.streamIDReply(endID)
	x.array(len(claimed))
	for i, id := range claimed {
		if justID {
			x.streamIDReply(id)
		} else {
			x.streamEntryReply(id, fields[i])
		}
	}
	x.array(len(deleted))
	for _, id := range deleted {
		x.streamIDReply(id)
	}
}

// cloneFields copies an entry's fields out of the stream (its Get result
// is valid only until the stream changes).
func cloneFields(f [][]byte) [][]byte {
	out := make([][]byte, len(f))
	for i, b := range f {
		out[i] = append([]byte(nil), b...)
	}
	return out
}
