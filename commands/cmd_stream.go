package commands

import (
	"bytes"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/stream"
	"github.com/tidwall/redcon"
)

// Streams: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM, XSETID and XREAD
// (BLOCK included, stream_block.go), as Redis 7.0.15's t_stream.c. A
// stream key's value is a *stream.Stream, changed in place under the
// key's shard lock and then reported with Shard.Changed (a new stream is
// stored with replace), so that WATCH, client-side caching, persistence
// and replication see every change; the stream records each change as an
// operation of its delta, which persistence and replication write instead
// of the whole stream. The consumer groups' commands are in
// cmd_streamgroup.go.

// xreadBlockedCount is Redis's XREAD_BLOCKED_DEFAULT_COUNT: the most
// entries a blocked XREAD without COUNT is answered with.
const xreadBlockedCount = 1000

// defaultTrimLimit is the LIMIT of an approximate trim that gives none:
// 100 * stream-node-max-entries, as Redis.
const defaultTrimLimit = 100 * stream.NodeMaxEntries

// streamOf returns v's stream, or WRONGTYPE.
func streamOf(v *keyspace.Value) (*stream.Stream, wireErr) {
	if v.Kind != keyspace.KindStream {
		return nil, msgWrongType
	}
	return v.Obj.(*stream.Stream), noErr
}

// string2ull is Redis's: a strict decimal that is not negative, else what
// strtoull(3) accepts entirely in base 10 (leading spaces, a sign, leading
// zeros; a "-" negates modulo 2^64), without overflow.
func string2ull(b []byte) (uint64, bool) {
	if v, ok := parseRedisInt(b); ok {
		if v < 0 {
			return 0, false
		}
		return uint64(v), true
	}
	i := 0
	for i < len(b) && (b[i] == ' ' || (b[i] >= '\t' && b[i] <= '\r')) {
		i++
	}
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	if i == len(b) {
		return 0, false
	}
	var v uint64
	for ; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (^uint64(0)-uint64(c-'0'))/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// parseStreamID is Redis's streamGenericParseIDOrReply: "<ms>-<seq>", "<ms>"
// (seq missingSeq), "-" and "+" unless strict, and with seqStar the XADD
// form "<ms>-*" (seqGiven false).
func parseStreamID(b []byte, missingSeq uint64, strict, seqStar bool) (id stream.ID, seqGiven bool, ok bool) {
	if len(b) > 127 {
		return id, false, false
	}
	if i := bytes.IndexByte(b, 0); i >= 0 { // Redis reads a C string
		b = b[:i]
	}
	if len(b) == 1 && (b[0] == '-' || b[0] == '+') {
		if strict {
			return id, false, false
		}
		if b[0] == '-' {
			return stream.ID{}, true, true
		}
		return stream.MaxID, true, true
	}
	msPart, seqPart, dash := bytes.Cut(b, []byte("-"))
	ms, ok := string2ull(msPart)
	if !ok {
		return id, false, false
	}
	seq := missingSeq
	seqGiven = true
	if dash {
		if seqStar && len(seqPart) == 1 && seqPart[0] == '*' {
			seq, seqGiven = 0, false
		} else if seq, ok = string2ull(seqPart); !ok {
			return id, false, false
		}
	}
	return stream.ID{Ms: ms, Seq: seq}, seqGiven, true
}

// strictID parses an ID where "-" and "+" are refused (Redis's
// streamParseStrictIDOrReply with missing seq 0).
func strictID(b []byte) (stream.ID, wireErr) {
	id, _, ok := parseStreamID(b, 0, true, false)
	if !ok {
		return id, msgStreamID
	}
	return id, noErr
}

// xaddArgs is what streamParseAddOrTrimArgsOrReply parses.
type xaddArgs struct {
	trim       stream.TrimArgs
	strategy   bool // MAXLEN or MINID given
	noMkStream bool
	idGiven    bool
	seqGiven   bool
	id         stream.ID
	idPos      int // XADD: the ID's position (len(args) when missing)
}

// parseTrimArgs is Redis's streamParseAddOrTrimArgsOrReply for XADD (xadd)
// and XTRIM.
func parseTrimArgs(args [][]byte, xadd bool) (a xaddArgs, msg wireErr) {
	limitGiven := false
	i := 2
	for ; i < len(args); i++ {
		more := len(args) - 1 - i
		opt := args[i]
		switch {
		case xadd && len(opt) == 1 && opt[0] == '*':
			a.idPos = i
			goto done
		case eqFold(opt, "maxlen") && more > 0, eqFold(opt, "minid") && more > 0:
			if a.strategy {
				return a, msgTrimBoth
			}
			byID := eqFold(opt, "minid")
			a.trim.Approx = false
			if next := args[i+1]; more >= 2 && len(next) == 1 && (next[0] == '~' || next[0] == '=') {
				a.trim.Approx = next[0] == '~'
				i++
			}
			if byID {
				id, m := strictID(args[i+1])
				if m != noErr {
					return a, m
				}
				a.trim.ByID, a.trim.MinID = true, id
			} else {
				n, ok := parseRedisInt(args[i+1])
				if !ok {
					return a, msgNotInt
				}
				if n < 0 {
					return a, msgMaxLenNegative
				}
				a.trim.MaxLen = n
			}
			i++
			a.strategy = true
		case eqFold(opt, "limit") && more > 0:
			n, ok := parseRedisInt(args[i+1])
			if !ok {
				return a, msgNotInt
			}
			if n < 0 {
				return a, msgLimitNegative
			}
			a.trim.Limit = n
			limitGiven = true
			i++
		case xadd && eqFold(opt, "nomkstream"):
			a.noMkStream = true
		case xadd:
			id, seqGiven, ok := parseStreamID(opt, 0, true, true)
			if !ok {
				return a, msgStreamID
			}
			a.id, a.seqGiven, a.idGiven, a.idPos = id, seqGiven, true, i
			goto done
		default:
			return a, msgSyntax
		}
	}
	a.idPos = i
done:
	if a.trim.Limit != 0 && !a.strategy {
		return a, msgLimitNoStrategy
	}
	if !xadd && !a.strategy {
		return a, msgXtrimNoStrategy
	}
	switch {
	case limitGiven && !a.trim.Approx:
		return a, msgLimitNoApprox
	case !limitGiven && a.trim.Approx:
		a.trim.Limit = defaultTrimLimit
	case !a.trim.Approx:
		a.trim.Limit = 0
	}
	return a, noErr
}

// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [field value ...]
func cmdXadd(x *ctx) {
	a, msg := parseTrimArgs(x.args, true)
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	fields := x.args[min(a.idPos+1, len(x.args)):]
	if a.idPos+1 > len(x.args) || len(fields) < 2 || len(fields)%2 != 0 {
		x.errorReply(errWrongArity(x.spec.Name))
		return
	}
	if a.idGiven && a.seqGiven && a.id.IsZero() {
		x.errorReply(msgXaddIDZero)
		return
	}
	k := &x.keys[0]
	nowMS := x.clockMS()
	v := k.lookup(nowMS)
	var s *stream.Stream
	if v != nil {
		if s, msg = streamOf(v); msg != noErr {
			x.errorReply(msg)
			return
		}
	} else if a.noMkStream {
		x.null()
		return
	}
	last := stream.ID{}
	if s != nil {
		last = s.LastID()
	}
	if last == stream.MaxID {
		x.errorReply(msgStreamExhausted)
		return
	}
	// streamAppendItem's ID.
	id := a.id
	switch {
	case !a.idGiven:
		if uint64(nowMS) > last.Ms {
			id = stream.ID{Ms: uint64(nowMS)}
		} else {
			id, _ = last.Incr()
		}
	case !a.seqGiven:
		if last.Ms == id.Ms {
			if last.Seq == ^uint64(0) {
				x.errorReply(msgStreamElementsTooLarge)
				return
			}
			id = stream.ID{Ms: last.Ms, Seq: last.Seq + 1}
		}
	}
	if !last.Less(id) {
		x.errorReply(msgXaddIDSmall)
		return
	}
	total := 0
	for _, f := range fields {
		total += len(f)
	}
	if total > stream.MaxEntryBytes {
		x.errorReply(msgStreamElementsTooLarge)
		return
	}
	if s != nil && s.MemSize() >= maxStreamSize {
		x.errorReply(msgStreamTooLarge)
		return
	}
	fresh := s == nil
	if fresh {
		s = stream.New()
	}
	s.Append(id, fields)
	if a.strategy {
		s.Trim(a.trim)
	}
	if fresh {
		k.replace(nil, keyspace.Value{Kind: keyspace.KindStream, Obj: s})
	} else {
		k.sh.Changed(k.key, v)
		x.wakeStream(k)
	}
	x.c.Out = appendStreamID(x.c.Out, id)
}

// maxStreamSize is stream.MaxSize, which tests lower.
var maxStreamSize = stream.MaxSize

// appendStreamID appends id as a bulk string.
func appendStreamID(dst []byte, id stream.ID) []byte {
	var buf [41]byte
	return redcon.AppendBulk(dst, id.AppendText(buf[:0]))
}

// lookupStream reads key's stream for a command: nil (and no error) when
// the key is missing, WRONGTYPE for another kind.
func (x *ctx) lookupStream(k *rkey) (*keyspace.Value, *stream.Stream, wireErr) {
	v := k.lookup(x.clockMS())
	if v == nil {
		return nil, nil, noErr
	}
	s, msg := streamOf(v)
	return v, s, msg
}

// XLEN key
func cmdXlen(x *ctx) {
	_, s, msg := x.lookupStream(&x.keys[0])
	switch {
	case msg != noErr:
		x.errorReply(msg)
	case s == nil:
		x.int(0)
	default:
		x.int(int64(s.Len()))
	}
}

// parseInterval is Redis's streamParseIntervalIDOrReply: a "(" prefix
// makes the bound exclusive (and its ID strict).
func parseInterval(b []byte, missingSeq uint64) (id stream.ID, exclusive bool, msg wireErr) {
	if len(b) > 1 && b[0] == '(' {
		id, _, ok := parseStreamID(b[1:], missingSeq, true, false)
		if !ok {
			return id, true, msgStreamID
		}
		return id, true, noErr
	}
	id, _, ok := parseStreamID(b, missingSeq, false, false)
	if !ok {
		return id, false, msgStreamID
	}
	return id, false, noErr
}

// XRANGE key start end [COUNT count]
func cmdXrange(x *ctx) { xrange(x, false) }

// XREVRANGE key end start [COUNT count]
func cmdXrevrange(x *ctx) { xrange(x, true) }

// rangeBound parses one end of XRANGE's interval (end: the upper one,
// whose missing sequence is the greatest): an exclusive start "(id" is
// the ID after it, an exclusive end the ID before it. On an error it
// answers it and returns false.
func rangeBound(x *ctx, arg []byte, end bool) (stream.ID, bool) {
	missing := uint64(0)
	if end {
		missing = ^uint64(0)
	}
	id, ex, msg := parseInterval(arg, missing)
	if msg != noErr {
		x.errorReply(msg)
		return id, false
	}
	if !ex {
		return id, true
	}
	next, ok := id.Incr()
	if end {
		next, ok = id.Decr()
		msg = msgStreamEndInterval
	} else {
		msg = msgStreamStartInterval
	}
	if !ok {
		x.errorReply(msg)
	}
	return next, ok
}

func xrange(x *ctx, rev bool) {
	startArg, endArg := x.args[2], x.args[3]
	if rev {
		startArg, endArg = endArg, startArg
	}
	start, ok := rangeBound(x, startArg, false)
	if !ok {
		return
	}
	end, ok := rangeBound(x, endArg, true)
	if !ok {
		return
	}
	count := int64(-1)
	for j := 4; j < len(x.args); j++ {
		if !eqFold(x.args[j], "count") || j+1 >= len(x.args) {
			x.errorReply(msgSyntax)
			return
		}
		n, ok := parseRedisInt(x.args[j+1])
		if !ok {
			x.errorReply(msgNotInt)
			return
		}
		count = max(n, 0)
		j++
	}
	_, s, msg := x.lookupStream(&x.keys[0])
	switch {
	case msg != noErr:
		x.errorReply(msg)
	case s == nil:
		x.array(0)
	case count == 0:
		x.nullArray()
	default:
		x.c.Out = appendRange(x.c.Out, s, start, end, rev, max(count, 0), x.c.Reserve)
	}
}

// appendRange appends the entries of s from start to end (rev: from end
// down to start), at most count (0: all), as an array of [id, fields].
// room, if not nil, is asked before each entry whether the reply built so
// far still fits the client's output buffer limit (resp.Conn.Reserve):
// past it the building stops, and the connection is closed, so that one
// read of a large stream does not build the whole reply first.
func appendRange(dst []byte, s *stream.Stream, start, end stream.ID, rev bool, count int64, room func(int) bool) []byte {
	var body []byte
	n := int64(0)
	s.Range(start, end, rev, func(e stream.Entry) bool {
		if room != nil && !room(len(body)) {
			return false
		}
		body = redcon.AppendArray(body, 2)
		body = appendStreamID(body, e.ID)
		body = redcon.AppendArray(body, len(e.Fields))
		for _, f := range e.Fields {
			body = redcon.AppendBulk(body, f)
		}
		n++
		return count == 0 || n < count
	})
	dst = redcon.AppendArray(dst, int(n))
	return append(dst, body...)
}

// XDEL key id [id ...]
func cmdXdel(x *ctx) {
	k := &x.keys[0]
	v, s, msg := x.lookupStream(k)
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	if s == nil {
		x.int(0)
		return
	}
	ids := make([]stream.ID, 0, len(x.args)-2)
	for _, a := range x.args[2:] {
		id, msg := strictID(a)
		if msg != noErr {
			x.errorReply(msg)
			return
		}
		ids = append(ids, id)
	}
	n := int64(0)
	for _, id := range ids {
		if s.Delete(id) {
			n++
		}
	}
	if n > 0 {
		k.sh.Changed(k.key, v)
	}
	x.int(n)
}

// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]
func cmdXtrim(x *ctx) {
	a, msg := parseTrimArgs(x.args, false)
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	k := &x.keys[0]
	v, s, msg := x.lookupStream(k)
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	if s == nil {
		x.int(0)
		return
	}
	n := s.Trim(a.trim)
	if n > 0 {
		k.sh.Changed(k.key, v)
	}
	x.int(n)
}

// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]
func cmdXsetid(x *ctx) {
	id, msg := strictID(x.args[2])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	added := int64(-1)
	var maxDel stream.ID
	for i := 3; i < len(x.args); i += 2 {
		more := len(x.args) - 1 - i
		switch {
		case eqFold(x.args[i], "entriesadded") && more > 0:
			n, ok := parseRedisInt(x.args[i+1])
			if !ok {
				x.errorReply(msgNotInt)
				return
			}
			if n < 0 {
				x.errorReply(msgEntriesAddedNegative)
				return
			}
			added = n
		case eqFold(x.args[i], "maxdeletedid") && more > 0:
			if maxDel, msg = strictID(x.args[i+1]); msg != noErr {
				x.errorReply(msg)
				return
			}
			if id.Less(maxDel) {
				x.errorReply(msgXsetidBelowMaxDeleted)
				return
			}
		default:
			x.errorReply(msgSyntax)
			return
		}
	}
	k := &x.keys[0]
	v, s, msg := x.lookupStream(k)
	switch {
	case msg != noErr:
		x.errorReply(msg)
		return
	case s == nil:
		x.errorReply(msgNoSuchKey)
		return
	}
	if s.Len() > 0 {
		top, _ := s.LastEntryID()
		if id.Less(top) {
			x.errorReply(msgXsetidBelowTop)
			return
		}
		if added != -1 && s.Len() > uint64(added) {
			x.errorReply(msgXsetidEntriesAdded)
			return
		}
	}
	if added == -1 {
		added = int64(s.EntriesAdded())
	}
	if maxDel.IsZero() {
		maxDel = s.MaxDeletedID()
	}
	s.SetID(id, uint64(added), maxDel)
	k.sh.Changed(k.key, v)
	x.ok()
}

// keywordKeys returns the Keys of a command whose key spec is found by
// keyword (Redis's getKeysUsingKeySpecs with begin_search keyword, then
// find_keys range lastkey -1, step 1, limit): the first argument from
// startFrom on (the last one excluded) equal to keyword, ignoring case,
// then 1/limit of the arguments after it. XREAD: ("streams", 1, 2);
// XREADGROUP: ("streams", 4, 2).
func keywordKeys(keyword string, startFrom, limit int) func(dst []int, args [][]byte) []int {
	return func(dst []int, args [][]byte) []int {
		first := 0
		for i := startFrom; i < len(args)-1; i++ {
			if eqFold(args[i], keyword) {
				first = i + 1
				break
			}
		}
		if first == 0 {
			return dst
		}
		for i := first; i <= first+(len(args)-first)/limit-1; i++ {
			dst = append(dst, i)
		}
		return dst
	}
}

// streamKeys is XREAD's Keys: the first half of the arguments after
// STREAMS.
var streamKeys = keywordKeys("streams", 1, 2)

// parseBlockTimeout is getTimeoutFromObjectOrReply in milliseconds.
func parseBlockTimeout(b []byte) (int64, wireErr) {
	n, ok := parseRedisInt(b)
	if !ok {
		return 0, msgTimeoutNotInt
	}
	if n < 0 {
		return 0, msgTimeoutNegative
	}
	return n, noErr
}

// XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]
func cmdXread(x *ctx) {
	timeout := int64(-1) // no BLOCK
	count := int64(0)
	streamsAt, n := 0, 0
	for i := 1; i < len(x.args); i++ {
		more := len(x.args) - i - 1
		o := x.args[i]
		switch {
		case eqFold(o, "block") && more > 0:
			i++
			t, msg := parseBlockTimeout(x.args[i])
			if msg != noErr {
				x.errorReply(msg)
				return
			}
			timeout = t
		case eqFold(o, "count") && more > 0:
			i++
			c, ok := parseRedisInt(x.args[i])
			if !ok {
				x.errorReply(msgNotInt)
				return
			}
			count = max(c, 0)
		case eqFold(o, "streams") && more > 0:
			streamsAt = i + 1
			n = len(x.args) - streamsAt
			if n%2 != 0 {
				x.errorReply(msgXreadUnbalanced)
				return
			}
			n /= 2
		case eqFold(o, "group") && more >= 2:
			x.errorReply(msgXreadGroupOption)
			return
		case eqFold(o, "noack"):
			x.errorReply(msgXreadNoackOption)
			return
		default:
			x.errorReply(msgSyntax)
			return
		}
		if streamsAt != 0 {
			break
		}
	}
	if streamsAt == 0 || len(x.keys) != n { // x.keys: streamKeys found them
		x.errorReply(msgSyntax)
		return
	}
	// The keys are x.keys, in order (streamKeys).
	ids := make([]stream.ID, n)
	for i := 0; i < n; i++ {
		_, s, msg := x.lookupStream(&x.keys[i])
		if msg != noErr {
			x.errorReply(msg)
			return
		}
		a := x.args[streamsAt+n+i]
		switch {
		case len(a) == 1 && a[0] == '$':
			if s != nil {
				ids[i] = s.LastID()
			}
			continue
		case len(a) == 1 && a[0] == '>':
			x.errorReply(msgXreadGtID)
			return
		}
		if ids[i], msg = strictID(a); msg != noErr {
			x.errorReply(msg)
			return
		}
	}
	// Serve at once what can be.
	var body []byte
	served := 0
	for i := 0; i < n; i++ {
		_, s, _ := x.lookupStream(&x.keys[i])
		if s == nil || s.Len() == 0 {
			continue
		}
		if top, _ := s.LastEntryID(); !ids[i].Less(top) {
			continue
		}
		served++
		if x.proto() == resp.RESP2 {
			body = redcon.AppendArray(body, 2)
		}
		body = redcon.AppendBulk(body, x.keys[i].key)
		start, _ := ids[i].Incr()
		body = appendRange(body, s, start, stream.MaxID, false, count, func(n int) bool { return x.c.Reserve(len(body) + n) })
	}
	if served > 0 {
		if x.proto() == resp.RESP2 {
			x.array(served)
		} else {
			x.mapLen(served)
		}
		x.c.Out = append(x.c.Out, body...)
		return
	}
	if timeout < 0 || x.inExec {
		// No BLOCK, or a transaction, which cannot block: as a timeout.
		x.nullArray()
		return
	}
	if count == 0 {
		count = xreadBlockedCount
	}
	x.blockXread(ids, timeout, count)
}

// blockXread parks an XREAD BLOCK on its keys: the first change that
// gives a key's stream a last ID above the one asked answers with that
// stream's new entries, as Redis's serveClientsBlockedOnStreamKey.
func (x *ctx) blockXread(ids []stream.ID, timeout, count int64) {
	proto := x.proto()
	after := make(map[string]stream.ID, len(ids))
	for i, id := range ids {
		if _, dup := after[string(x.keys[i].key)]; !dup {
			after[string(x.keys[i].key)] = id
		}
	}
	try := func(key []byte, sh *keyspace.Shard, v *keyspace.Value, nowMS int64) ([]byte, bool) {
		if v == nil || v.Kind != keyspace.KindStream {
			return nil, false
		}
		s := v.Obj.(*stream.Stream)
		gt := after[string(key)]
		if !gt.Less(s.LastID()) {
			return nil, false
		}
		var out []byte
		if proto == resp.RESP2 {
			out = redcon.AppendArray(out, 1)
			out = redcon.AppendArray(out, 2)
		} else {
			out = resp.AppendMapLen(out, proto, 1)
		}
		out = redcon.AppendBulk(out, key)
		start, _ := gt.Incr()
		return appendRange(out, s, start, stream.MaxID, false, count, nil), true
	}
	if !x.blockOnKeys(x.keys, timeout, try, resp.AppendNullArray(nil, proto)) {
		x.errorReply(msgTooManyBlocked)
	}
}
