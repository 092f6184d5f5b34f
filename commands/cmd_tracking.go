package commands

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/resp"
)

// Client-side caching (CLIENT TRACKING), with Redis 7.0's semantics
// (src/tracking.c). A tracking client in the default mode has the keys of
// the read-only commands it runs remembered in the tracking table; the
// first change of such a key by anyone (a write, a limiter call that
// stores new state, DEL, EXPIRE, removal of the expired key, eviction)
// sends it an invalidation push frame and forgets the key for every
// client. FLUSHDB and FLUSHALL send every tracking client an invalidation
// with a null instead of keys and empty the table. OPTIN remembers the
// keys of the command (or transaction) after CLIENT CACHING YES only;
// OPTOUT remembers all but those after CLIENT CACHING NO. NOLOOP: no
// invalidation for the client's own changes. BCAST: no table; every change
// of a key that starts with one of the client's prefixes (any key without
// PREFIX) is sent to it.
//
// Invalidations are RESP3 push frames, so they reach RESP3 clients (HELLO
// 3): the tracking client itself, or its REDIRECT target. A RESP2 client
// may turn tracking on without REDIRECT, as in Redis, but receives
// nothing. A RESP2 REDIRECT target gets them as pub/sub messages of the
// __redis__:invalidate channel (*3 message __redis__:invalidate [keys]),
// while it is subscribed to any channel or pattern, as in Redis.
//
// Changes are seen through the keyspace's Journal (watchJournal, which
// serves WATCH too), called with the changed key's shard lock held. While no key is tracked and no
// client broadcasts, it costs one atomic load per change.

// Tracking flags of a client (client.trk), as Redis's CLIENT_TRACKING*.
const (
	trkOn uint32 = 1 << iota
	trkBcast
	trkOptin
	trkOptout
	trkCaching // CLIENT CACHING YES (OPTIN) or NO (OPTOUT) for the next command
	trkNoloop
)

// DefaultTrackingTableMaxKeys is the default bound of the tracking table
// (Redis's tracking-table-max-keys): past it, keys are forgotten, and their
// clients told to invalidate them, until it holds this many.
const DefaultTrackingTableMaxKeys = 1000000

// trackTable is the server's tracking state. It is safe for concurrent
// use.
type trackTable struct {
	// active counts tracked keys plus broadcast prefixes: the journal
	// looks no further while it is 0.
	active  atomic.Int64
	clients atomic.Int64 // clients with tracking on (INFO tracking_clients)
	maxKeys atomic.Int64 // 0: unbounded

	mu       sync.Mutex
	keys     map[string]map[*client]struct{} // key -> clients that read it
	items    int64                           // sum of len(keys[k])
	prefixes map[string]map[*client]struct{} // BCAST prefix -> clients
	all      map[*client]struct{}            // clients with tracking on
}

func newTrackTable(maxKeys int64) *trackTable {
	t := &trackTable{
		keys:     make(map[string]map[*client]struct{}),
		prefixes: make(map[string]map[*client]struct{}),
		all:      make(map[*client]struct{}),
	}
	t.maxKeys.Store(maxKeys)
	return t
}

// invalidateFrame is the RESP3 push of one invalidated key.
func invalidateFrame(key []byte) []byte {
	b := make([]byte, 0, 32+len(key))
	b = append(b, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$"...)
	b = strconv.AppendInt(b, int64(len(key)), 10)
	b = append(b, '\r', '\n')
	b = append(b, key...)
	return append(b, '\r', '\n')
}

// invalidatePrefix is how invalidateFrame and flushFrame start.
const invalidatePrefix = ">2\r\n$10\r\ninvalidate\r\n"

// invalidateMessage turns an invalidation push into what a RESP2 REDIRECT
// target receives, as Redis 7.0's sendTrackingMessage sends it: a message
// of the __redis__:invalidate channel whose payload is the array of keys,
// or a null bulk for a flush.
func invalidateMessage(frame []byte) []byte {
	rest := frame[len(invalidatePrefix):]
	if string(rest) == "_\r\n" {
		rest = []byte("$-1\r\n")
	}
	b := make([]byte, 0, 48+len(rest))
	b = append(b, "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n"...)
	return append(b, rest...)
}

// flushFrame is the RESP3 push that invalidates everything.
var flushFrame = []byte(">2\r\n$10\r\ninvalidate\r\n_\r\n")

// sendInvalidation delivers frame for cl if it still tracks: to its
// REDIRECT target, or to itself in RESP3. A client whose target has gone
// is sent tracking-redir-broken instead, as Redis 7.0 does, at every
// invalidation.
func (cl *client) sendInvalidation(frame []byte) {
	if cl.trk.Load()&trkOn == 0 {
		return
	}
	if id := cl.redirID.Load(); id != 0 {
		t := cl.redir.Load()
		if t == nil || t.closed.Load() {
			cl.redirBroken.Store(true)
			if cl.resp3.Load() {
				b := append([]byte(">2\r\n$21\r\ntracking-redir-broken\r\n:"), strconv.FormatInt(id, 10)...)
				cl.conn.Push(append(b, '\r', '\n'))
			}
			return
		}
		if t.resp3.Load() {
			t.conn.Push(frame)
		} else if t.subscribed() {
			t.conn.Push(invalidateMessage(frame))
		}
		return
	}
	if cl.resp3.Load() {
		cl.conn.Push(frame)
	}
}

// clientByID returns the client of connection id, or nil.
func (s *Server) clientByID(id int64) *client {
	n := s.net.Load()
	if n == nil {
		return nil
	}
	var found *client
	n.Range(func(c *resp.Conn) bool {
		if c.ID() == id {
			found, _ = c.Context().(*client)
			return false
		}
		return true
	})
	return found
}

// touch is the change of key in database db: the clients that read it
// are sent an invalidation, and it is forgotten; broadcasting clients
// with a matching prefix are sent one too.
func (t *trackTable) touch(ks *keyspace.Keyspace, db int, key []byte) {
	var sh *keyspace.Shard
	shard := func() *keyspace.Shard {
		if sh == nil {
			sh = ks.DB(db).Shard(key)
		}
		return sh
	}
	var frame []byte
	t.mu.Lock()
	targets := t.keys[string(key)]
	if targets != nil {
		delete(t.keys, string(key))
		t.items -= int64(len(targets))
		t.active.Add(-1)
	}
	var bcast []*client
	for p, cls := range t.prefixes {
		if strings.HasPrefix(string(key), p) {
			for cl := range cls {
				bcast = append(bcast, cl)
			}
		}
	}
	t.mu.Unlock()
	for cl := range targets {
		if cl.trk.Load()&(trkBcast|trkNoloop) == trkNoloop && cl.writer(shard()) {
			continue
		}
		if cl.trk.Load()&trkBcast != 0 {
			continue
		}
		if frame == nil {
			frame = invalidateFrame(key)
		}
		cl.sendInvalidation(frame)
	}
	seen := map[*client]bool{}
	for _, cl := range bcast {
		if seen[cl] {
			continue // two of its prefixes match: one message
		}
		seen[cl] = true
		if cl.trk.Load()&trkNoloop != 0 && cl.writer(shard()) {
			continue
		}
		if frame == nil {
			frame = invalidateFrame(key)
		}
		cl.sendInvalidation(frame)
	}
}

// flush is FLUSHDB or FLUSHALL: every tracking client is told to drop
// everything, and the table is emptied.
func (t *trackTable) flush() {
	t.mu.Lock()
	all := make([]*client, 0, len(t.all))
	for cl := range t.all {
		all = append(all, cl)
	}
	t.active.Add(-int64(len(t.keys)))
	t.keys = make(map[string]map[*client]struct{})
	t.items = 0
	t.mu.Unlock()
	for _, cl := range all {
		cl.sendInvalidation(flushFrame)
	}
}

// remember records that cl read key (default mode), then keeps the table
// within maxKeys.
func (t *trackTable) remember(cl *client, keys [][]byte) {
	t.mu.Lock()
	for _, key := range keys {
		cls := t.keys[string(key)]
		if cls == nil {
			cls = make(map[*client]struct{}, 1)
			t.keys[string(key)] = cls
			t.active.Add(1)
		}
		if _, ok := cls[cl]; !ok {
			cls[cl] = struct{}{}
			t.items++
		}
	}
	var evicted []evictedKey
	if max := t.maxKeys.Load(); max > 0 {
		for k, cls := range t.keys {
			if int64(len(t.keys)) <= max {
				break
			}
			delete(t.keys, k)
			t.items -= int64(len(cls))
			t.active.Add(-1)
			evicted = append(evicted, evictedKey{k, cls})
		}
	}
	t.mu.Unlock()
	for _, e := range evicted {
		frame := invalidateFrame([]byte(e.key))
		for cl := range e.cls {
			if cl.trk.Load()&trkBcast == 0 {
				cl.sendInvalidation(frame)
			}
		}
	}
}

type evictedKey struct {
	key string
	cls map[*client]struct{}
}

// enable turns tracking on for cl with flags (trkOn and the options) and,
// for BCAST, prefixes ("" when none was given).
func (t *trackTable) enable(cl *client, flags uint32, prefixes []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cl.trk.Load()&trkOn == 0 {
		t.clients.Add(1)
		t.all[cl] = struct{}{}
	}
	if flags&trkBcast != 0 {
		for _, p := range prefixes {
			cls := t.prefixes[p]
			if cls == nil {
				cls = make(map[*client]struct{})
				t.prefixes[p] = cls
			}
			if _, ok := cls[cl]; !ok {
				cls[cl] = struct{}{}
				cl.trkPrefixes = append(cl.trkPrefixes, p)
				t.active.Add(1)
			}
		}
	}
	cl.trk.Store(flags)
}

// disable turns tracking off for cl. The keys it read stay in the table
// until changed, as in Redis; it is sent nothing for them.
func (t *trackTable) disable(cl *client) {
	if cl.trk.Load()&trkOn == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range cl.trkPrefixes {
		cls := t.prefixes[p]
		delete(cls, cl)
		if len(cls) == 0 {
			delete(t.prefixes, p)
		}
		t.active.Add(-1)
	}
	cl.trkPrefixes = nil
	delete(t.all, cl)
	t.clients.Add(-1)
	cl.trk.Store(0)
	cl.noloop = false
}

// stats returns INFO's tracking_total_keys, _items and _prefixes.
func (t *trackTable) stats() (keys, items, prefixes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.keys)), t.items, int64(len(t.prefixes))
}

// trackRead remembers the keys of a read-only command cl ran, unless the
// client broadcasts, or OPTIN/OPTOUT and CLIENT CACHING say not to.
func (s *Server) trackRead(x *ctx, sp *Spec) {
	f := x.cl.trk.Load()
	if f&trkBcast != 0 {
		return
	}
	caching := f&trkCaching != 0
	if (f&trkOptin != 0 && !caching) || (f&trkOptout != 0 && caching) {
		return
	}
	if len(x.keys) == 0 {
		return
	}
	keys := make([][]byte, len(x.keys))
	for i := range x.keys {
		keys[i] = x.keys[i].key
	}
	s.track.remember(x.cl, keys)
}

// afterCommand clears CLIENT CACHING's flag after the command (or the
// transaction) it applies to, as Redis's resetClient: not inside MULTI,
// nor after a CLIENT subcommand.
func (cl *client) afterCommand(sp *Spec) {
	f := cl.trk.Load()
	if f&trkCaching == 0 || cl.inMulti || sp != nil && strings.HasPrefix(sp.Name, "client") {
		return
	}
	cl.trk.Store(f &^ trkCaching)
}

// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN]
// [OPTOUT] [NOLOOP]
func cmdClientTracking(x *ctx) {
	cl := x.cl
	var opts uint32
	var prefixes []string
	var redir *client
	var redirID int64
	for j := 3; j < len(x.args); j++ {
		more := len(x.args) - 1 - j
		switch a := strings.ToLower(string(x.args[j])); {
		case a == "redirect" && more > 0:
			j++
			if redir != nil {
				x.errorReply(msgTrackingRedirectTwice)
				return
			}
			id, err := strconv.ParseInt(string(x.args[j]), 10, 64)
			if err != nil {
				x.errorReply(msgNotInt)
				return
			}
			if redir = x.s.clientByID(id); redir == nil {
				x.errorReply(msgTrackingRedirectNone)
				return
			}
			redirID = id
		case a == "bcast":
			opts |= trkBcast
		case a == "optin":
			opts |= trkOptin
		case a == "optout":
			opts |= trkOptout
		case a == "noloop":
			opts |= trkNoloop
		case a == "prefix" && more > 0:
			j++
			prefixes = append(prefixes, string(x.args[j]))
		default:
			x.errorReply(msgSyntax)
			return
		}
	}
	switch strings.ToLower(string(x.args[2])) {
	case "on":
	case "off":
		x.s.track.disable(cl)
		x.ok()
		return
	default:
		x.errorReply(msgSyntax)
		return
	}
	cur := cl.trk.Load()
	switch {
	case opts&trkBcast == 0 && len(prefixes) > 0:
		x.errorReply(msgTrackingPrefixBcast)
		return
	case cur&trkOn != 0 && (cur&trkBcast != 0) != (opts&trkBcast != 0):
		x.errorReply(msgTrackingSwitchBcast)
		return
	case opts&trkBcast != 0 && opts&(trkOptin|trkOptout) != 0:
		x.errorReply(msgTrackingBcastOpt)
		return
	case opts&trkOptin != 0 && opts&trkOptout != 0:
		x.errorReply(msgTrackingOptinOptout)
		return
	case opts&trkOptin != 0 && cur&trkOptout != 0 || opts&trkOptout != 0 && cur&trkOptin != 0:
		x.errorReply(msgTrackingSwitchOpt)
		return
	}
	if opts&trkBcast != 0 {
		if len(prefixes) == 0 {
			prefixes = []string{""}
		}
		for i, p := range prefixes {
			for _, q := range cl.trkPrefixes {
				if prefixesOverlap(p, q) {
					x.errorReply(errTrackingPrefixExisting(p, q))
					return
				}
			}
			for _, q := range prefixes[i+1:] {
				if prefixesOverlap(p, q) {
					x.errorReply(errTrackingPrefixProvided(p, q))
					return
				}
			}
		}
	}
	cl.noloop = opts&trkNoloop != 0
	cl.redir.Store(redir)
	cl.redirID.Store(redirID)
	cl.redirBroken.Store(false)
	x.s.track.enable(cl, trkOn|opts|cur&trkCaching, prefixes)
	x.ok()
}

// prefixesOverlap reports whether one of two BCAST prefixes starts with
// the other (Redis's stringCheckPrefix).
func prefixesOverlap(a, b string) bool {
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// CLIENT CACHING YES|NO
func cmdClientCaching(x *ctx) {
	cl := x.cl
	f := cl.trk.Load()
	if f&trkOn == 0 {
		x.errorReply(msgCachingNotTracking)
		return
	}
	switch strings.ToLower(string(x.args[2])) {
	case "yes":
		if f&trkOptin == 0 {
			x.errorReply(msgCachingYes)
			return
		}
	case "no":
		if f&trkOptout == 0 {
			x.errorReply(msgCachingNo)
			return
		}
	default:
		x.errorReply(msgSyntax)
		return
	}
	cl.trk.Store(f | trkCaching)
	x.ok()
}

// CLIENT GETREDIR: the REDIRECT target's id while tracking (0: none),
// -1 when not tracking.
func cmdClientGetRedir(x *ctx) {
	if x.cl.trk.Load()&trkOn != 0 {
		x.int(x.cl.redirID.Load())
		return
	}
	x.int(-1)
}

// CLIENT TRACKINGINFO
func cmdClientTrackingInfo(x *ctx) {
	f := x.cl.trk.Load()
	var flags []string
	if f&trkOn != 0 {
		flags = append(flags, "on")
	} else {
		flags = append(flags, "off")
	}
	if f&trkBcast != 0 {
		flags = append(flags, "bcast")
	}
	if f&trkOptin != 0 {
		flags = append(flags, "optin")
		if f&trkCaching != 0 {
			flags = append(flags, "caching-yes")
		}
	}
	if f&trkOptout != 0 {
		flags = append(flags, "optout")
		if f&trkCaching != 0 {
			flags = append(flags, "caching-no")
		}
	}
	if f&trkNoloop != 0 {
		flags = append(flags, "noloop")
	}
	if f&trkOn != 0 && x.cl.redirBroken.Load() {
		flags = append(flags, "broken_redirect")
	}
	x.mapLen(3)
	x.bulkStr("flags")
	x.setLen(len(flags))
	for _, s := range flags {
		x.bulkStr(s)
	}
	x.bulkStr("redirect")
	if f&trkOn != 0 {
		x.int(x.cl.redirID.Load())
	} else {
		x.int(-1)
	}
	x.bulkStr("prefixes")
	ps := slices.Sorted(slices.Values(x.cl.trkPrefixes))
	x.array(len(ps))
	for _, p := range ps {
		x.bulkStr(p)
	}
}
