package commands

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/armon/go-radix"

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
// BCAST prefixes live in radix trees (github.com/armon/go-radix): the
// server's, prefix -> clients, where a changed key finds the prefixes it
// starts with by walking its own bytes (WalkPath: at most len(key)+1
// nodes, however many prefixes are registered); and each client's, where
// a new prefix is checked for overlap with the client's others the same
// way (a stored prefix of it on its path, WalkPath; a stored key that
// starts with it, the first of WalkPrefix). Redis has no bound on them;
// cellserver caps them (TrackingMaxPrefixesPerClient, TrackingMaxPrefixes,
// TrackingMaxPrefixLen) and refuses a command that would pass a cap
// before building anything.
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

// Caps on BCAST prefixes, which Redis does not bound. A CLIENT TRACKING
// command that would pass one is refused whole, before anything is built
// or registered (CONFIG GET shows them, under the names in
// trackingSettings).
//
//   - TrackingMaxPrefixesPerClient: prefixes of one connection (PREFIX
//     arguments; BCAST without PREFIX counts as one, ""). Clients register
//     a handful (one per kind of key they cache: "user:", "lim:"); ten
//     thousand leaves room for a prefix per tenant and bounds the work of
//     one command (10000 prefixes checked and registered: about 15 ms of
//     its event loop).
//   - TrackingMaxPrefixes: prefixes of every connection together (each
//     connection's counted; two with the same prefix count two). With
//     TrackingMaxPrefixLen it bounds their memory: about 430 bytes plus
//     the prefix each (two tree entries and a client set), so about 45 MB
//     at the cap with 8-byte prefixes and 145 MB with 1 KiB ones (live
//     heap after a GC).
//   - TrackingMaxPrefixLen: bytes of one prefix. A prefix is the start of
//     a key; a kilobyte is longer than any key a rate limiter needs.
const (
	TrackingMaxPrefixesPerClient = 10000
	TrackingMaxPrefixes          = 100000
	TrackingMaxPrefixLen         = 1024
)

// trackingSettings are the caps as CONFIG GET shows them.
var trackingSettings = []Setting{
	{Name: "tracking-max-prefixes-per-client", Value: strconv.Itoa(TrackingMaxPrefixesPerClient)},
	{Name: "tracking-max-prefixes", Value: strconv.Itoa(TrackingMaxPrefixes)},
	{Name: "tracking-max-prefix-len", Value: strconv.Itoa(TrackingMaxPrefixLen)},
}

// trackState is a client's part of client-side caching.
type trackState struct {
	// flags holds the tracking flags (trkOn, ...); written by this client
	// (under Service.track.mu for on/off), read by whichever client
	// changes a key it tracks.
	flags atomic.Uint32
	// noloop mirrors trkNoloop for ctx.lockShards; held, heldMore and
	// heldAll say which shard locks (or every one, in EXEC) this NOLOOP
	// client holds, so that a change under one is known as its own
	// (writer).
	noloop  bool
	heldAll atomic.Bool
	// redir is the REDIRECT target (redirID its id, 0: none);
	// redirBroken: it had gone at an invalidation.
	redirBroken atomic.Bool
	// prefixes are the BCAST prefixes (keys of a radix tree, nil before
	// any; guarded by Service.track.mu; read by this client's CLIENT
	// TRACKING and TRACKINGINFO).
	prefixes *radix.Tree
	held     [heldInline]atomic.Pointer[keyspace.Shard]
	heldMore atomic.Pointer[[]*keyspace.Shard]
	redir    atomic.Pointer[client]
	redirID  atomic.Int64
}

// trackTable is the server's tracking state. It is safe for concurrent
// use.
type trackTable struct {
	// active counts tracked keys plus broadcast prefixes: the journal
	// looks no further while it is 0.
	active  atomic.Int64
	clients atomic.Int64 // clients with tracking on (INFO tracking_clients)
	maxKeys atomic.Int64 // 0: unbounded

	// checked counts the work of checking new BCAST prefixes for
	// overlap (prefixCollision's tree lookups plus pairs compared), which
	// tests bound.
	checked atomic.Int64

	mu    sync.Mutex
	keys  map[string]map[*client]struct{} // key -> clients that read it
	items int64                           // sum of len(keys[k])
	// prefixes maps each BCAST prefix to its clients
	// (map[*client]struct{}); nprefix counts the pairs (the sum of the
	// sets' sizes), against TrackingMaxPrefixes.
	prefixes *radix.Tree
	nprefix  int64
	// bcast holds the BCAST invalidations not sent yet.
	bcast bcastPending
	// examined counts the prefixes a changed key was compared with (the
	// ones on its path in prefixes): the work of touch, which tests
	// bound.
	examined int64
	all      map[*client]struct{} // clients with tracking on
}

func newTrackTable(maxKeys int64) *trackTable {
	t := &trackTable{
		keys:     make(map[string]map[*client]struct{}),
		prefixes: radix.New(),
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
	if cl.track.flags.Load()&trkOn == 0 {
		return
	}
	if id := cl.track.redirID.Load(); id != 0 {
		t := cl.track.redir.Load()
		if t == nil || t.closed.Load() {
			cl.track.redirBroken.Store(true)
			if cl.resp3() {
				b := append([]byte(">2\r\n$21\r\ntracking-redir-broken\r\n:"), strconv.FormatInt(id, 10)...)
				cl.conn.Push(append(b, '\r', '\n'))
			}
			return
		}
		if t.resp3() {
			t.conn.Push(frame)
		} else if t.subscribed() {
			t.conn.Push(invalidateMessage(frame))
		}
		return
	}
	if cl.resp3() {
		cl.conn.Push(frame)
	}
}

// clientByID returns the client of connection id, or nil.
func (s *Service) clientByID(id int64) *client {
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
	var targets map[*client]struct{}
	var buf [4]bcastHit
	t.mu.Lock()
	if len(t.keys) > 0 {
		if targets = t.keys[string(key)]; targets != nil {
			delete(t.keys, string(key))
			t.items -= int64(len(targets))
			t.active.Add(-1)
		}
	}
	bcast := t.bcastHitsLocked(string(key), buf[:0])
	t.mu.Unlock()
	if len(targets) == 0 && len(bcast) == 0 {
		return
	}
	for cl := range targets {
		if cl.track.flags.Load()&(trkBcast|trkNoloop) == trkNoloop && cl.writer(shard()) {
			continue
		}
		if cl.track.flags.Load()&trkBcast != 0 {
			continue
		}
		if frame == nil {
			frame = invalidateFrame(key)
		}
		cl.sendInvalidation(frame)
	}
	var skey string
	for _, h := range bcast {
		if h.cl.track.flags.Load()&trkNoloop != 0 && h.cl.writer(shard()) {
			continue
		}
		if h.cl.track.redirID.Load() == 0 && !h.cl.resp3() {
			continue // a RESP2 client without REDIRECT receives nothing
		}
		if skey == "" {
			skey = string(key)
		}
		t.queueBcast(h, skey)
	}
}

// bcastHit is one BCAST prefix of one client that a changed key starts
// with. A client's prefixes do not overlap (CLIENT TRACKING refuses
// that), so a key is one hit per client at most.
type bcastHit struct {
	cl     *client
	prefix string
}

// bcastPending gathers the keys changed under each BCAST prefix of each
// client until they are sent, as Redis gathers them until its event loop
// sleeps (trackingBroadcastInvalidationMessages): one invalidation per
// client and prefix with every key changed meanwhile. Here they are sent
// once the command that changed them has run (Service.ServeRESP, EXEC
// included), or after bcastDelay for changes made outside a command
// (expiry sweeps, a replica applying its primary's changes).
type bcastPending struct {
	any   atomic.Bool
	mu    sync.Mutex
	order []bcastHit
	keys  map[bcastHit]map[string]struct{}
	bytes int // of the keys in keys, with bcastKeyOverhead each
	timer *time.Timer
}

// bcastDelay bounds how long a change made outside a command waits before
// its BCAST invalidation is sent.
var bcastDelay = time.Millisecond // a variable for tests

// queueBcast records that key changed under h until flushBcast.
// Past bcastMaxPending bytes of keys pending (a command changing many
// keys watched by many clients), they are sent at once.
func (t *trackTable) queueBcast(h bcastHit, key string) {
	p := &t.bcast
	p.mu.Lock()
	if p.keys == nil {
		p.keys = make(map[bcastHit]map[string]struct{})
	}
	set := p.keys[h]
	if set == nil {
		set = make(map[string]struct{})
		p.keys[h] = set
		p.order = append(p.order, h)
	}
	if _, ok := set[key]; !ok {
		set[key] = struct{}{}
		p.bytes += len(key) + bcastKeyOverhead
	}
	full := p.bytes > bcastMaxPending
	if !p.any.Load() {
		p.any.Store(true)
		if p.timer == nil {
			p.timer = time.AfterFunc(bcastDelay, t.flushBcast)
		} else {
			p.timer.Reset(bcastDelay)
		}
	}
	p.mu.Unlock()
	if full {
		t.flushBcast()
	}
}

// bcastMaxPending bounds the bytes of BCAST invalidations held before they
// are sent (keys, counted once per client and prefix, plus
// bcastKeyOverhead each for the set's entry).
const (
	bcastMaxPending  = 1 << 20
	bcastKeyOverhead = 48
)

// flushBcast sends each client the keys changed under each of its
// prefixes since the last flush, in one invalidation per prefix (the
// prefixes and each one's keys in byte order, each key once, as Redis's
// radix trees list them).
func (t *trackTable) flushBcast() {
	p := &t.bcast
	p.mu.Lock()
	order, keys := p.order, p.keys
	p.order, p.keys, p.bytes = nil, nil, 0
	p.any.Store(false)
	p.mu.Unlock()
	// Prefixes in byte order, as Redis walks its tree of them.
	slices.SortStableFunc(order, func(a, b bcastHit) int { return strings.Compare(a.prefix, b.prefix) })
	for _, h := range order {
		set := keys[h]
		list := make([]string, 0, len(set))
		for k := range set {
			list = append(list, k)
		}
		slices.Sort(list)
		if h.cl.track.flags.Load()&trkBcast == 0 {
			continue // tracking turned off (or out of BCAST) since
		}
		h.cl.sendInvalidation(invalidateFrameKeys(list))
	}
}

// invalidateFrameKeys is the RESP3 push of several invalidated keys.
func invalidateFrameKeys(keys []string) []byte {
	n := 32
	for _, k := range keys {
		n += len(k) + 16
	}
	b := make([]byte, 0, n)
	b = append(b, invalidatePrefix...)
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(keys)), 10)
	b = append(b, '\r', '\n')
	for _, k := range keys {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, '\r', '\n')
		b = append(b, k...)
		b = append(b, '\r', '\n')
	}
	return b
}

// bcastLocked appends to bcast the clients with a BCAST prefix that key
// starts with (bcastHitsLocked without the prefixes). t.mu must be held.
func (t *trackTable) bcastLocked(key string, bcast []*client) []*client {
	for _, h := range t.bcastHitsLocked(key, nil) {
		bcast = append(bcast, h.cl)
	}
	return bcast
}

// bcastHitsLocked appends to bcast the clients with a BCAST prefix that
// key starts with, with that prefix. The prefixes key starts with are on
// its path in t.prefixes: at most len(key)+1 nodes are visited, however
// many prefixes are registered. t.mu must be held.
func (t *trackTable) bcastHitsLocked(key string, bcast []bcastHit) []bcastHit {
	if t.nprefix == 0 {
		return bcast
	}
	t.prefixes.WalkPath(key, func(prefix string, v any) bool {
		t.examined++
		for cl := range v.(map[*client]struct{}) {
			bcast = append(bcast, bcastHit{cl, prefix})
		}
		return false
	})
	return bcast
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
			if cl.track.flags.Load()&trkBcast == 0 {
				cl.sendInvalidation(frame)
			}
		}
	}
}

type evictedKey struct {
	key string
	cls map[*client]struct{}
}

// trackingOn is what CLIENT TRACKING ON sets: the flags (trkOn and the
// options), for BCAST the prefixes ("" when none was given), and the
// REDIRECT target (nil, 0: none).
type trackingOn struct {
	flags    uint32
	prefixes []string
	noloop   bool
	redir    *client
	redirID  int64
}

// enable turns tracking on for cl as o says. It refuses, changing
// nothing, prefixes that would take the server past TrackingMaxPrefixes
// (the caller has checked the other caps and the overlaps).
func (t *trackTable) enable(cl *client, o trackingOn) wireErr {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o.flags&trkBcast != 0 && t.nprefix+int64(len(o.prefixes)) > TrackingMaxPrefixes {
		return msgTrackingPrefixesServer
	}
	cl.track.noloop = o.noloop
	cl.track.redir.Store(o.redir)
	cl.track.redirID.Store(o.redirID)
	cl.track.redirBroken.Store(false)
	if cl.track.flags.Load()&trkOn == 0 {
		t.clients.Add(1)
		t.all[cl] = struct{}{}
	}
	if o.flags&trkBcast != 0 {
		if cl.track.prefixes == nil {
			cl.track.prefixes = radix.New()
		}
		for _, p := range o.prefixes {
			v, ok := t.prefixes.Get(p)
			if !ok {
				v = make(map[*client]struct{}, 1)
				t.prefixes.Insert(p, v)
			}
			cls := v.(map[*client]struct{})
			if _, ok := cls[cl]; !ok {
				cls[cl] = struct{}{}
				cl.track.prefixes.Insert(p, nil)
				t.nprefix++
				t.active.Add(1)
			}
		}
	}
	cl.track.flags.Store(o.flags)
	return noErr
}

// disable turns tracking off for cl. The keys it read stay in the table
// until changed, as in Redis; it is sent nothing for them.
func (t *trackTable) disable(cl *client) {
	if cl.track.flags.Load()&trkOn == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cl.track.prefixes != nil {
		cl.track.prefixes.Walk(func(p string, _ any) bool {
			if v, ok := t.prefixes.Get(p); ok {
				cls := v.(map[*client]struct{})
				delete(cls, cl)
				if len(cls) == 0 {
					t.prefixes.Delete(p)
				}
			}
			t.nprefix--
			t.active.Add(-1)
			return false
		})
	}
	cl.track.prefixes = nil
	delete(t.all, cl)
	t.clients.Add(-1)
	cl.track.flags.Store(0)
	cl.track.noloop = false
}

// stats returns INFO's tracking_total_keys, _items and _prefixes.
func (t *trackTable) stats() (keys, items, prefixes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.keys)), t.items, int64(t.prefixes.Len())
}

// trackRead remembers the keys of a read-only command cl ran, unless the
// client broadcasts, or OPTIN/OPTOUT and CLIENT CACHING say not to.
func (s *Service) trackRead(x *ctx, sp *Spec) {
	f := x.cl.track.flags.Load()
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
	f := cl.track.flags.Load()
	if f&trkCaching == 0 || cl.multi.on || sp != nil && strings.HasPrefix(sp.Name, "client") {
		return
	}
	cl.track.flags.Store(f &^ trkCaching)
}

// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN]
// [OPTOUT] [NOLOOP]
func cmdClientTracking(x *ctx) {
	cl := x.cl
	var opts uint32
	// The PREFIX arguments, kept (not copied) up to the per-client cap;
	// nprefix counts them all.
	var prefixArgs [][]byte
	nprefix := 0
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
			if nprefix++; nprefix <= TrackingMaxPrefixesPerClient {
				prefixArgs = append(prefixArgs, x.args[j])
			}
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
	cur := cl.track.flags.Load()
	switch {
	case opts&trkBcast == 0 && nprefix > 0:
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
	var prefixes []string
	if opts&trkBcast != 0 {
		// The caps first, before anything is built.
		have := 0
		if cl.track.prefixes != nil {
			have = cl.track.prefixes.Len()
		}
		if nprefix == 0 {
			nprefix = 1 // ""
		}
		if have+nprefix > TrackingMaxPrefixesPerClient {
			x.errorReply(msgTrackingPrefixesClient)
			return
		}
		for _, p := range prefixArgs {
			if len(p) > TrackingMaxPrefixLen {
				x.errorReply(msgTrackingPrefixLen)
				return
			}
		}
		if x.s.track.prefixCount()+int64(nprefix) > TrackingMaxPrefixes {
			x.errorReply(msgTrackingPrefixesServer)
			return
		}
		prefixes = make([]string, len(prefixArgs), max(len(prefixArgs), 1))
		for i, p := range prefixArgs {
			prefixes[i] = string(p)
		}
		if len(prefixes) == 0 {
			prefixes = append(prefixes, "")
		}
		e, work := prefixCollision(cl.track.prefixes, prefixes)
		x.s.track.checked.Add(int64(work))
		if e != noErr {
			x.errorReply(e)
			return
		}
	}
	if e := x.s.track.enable(cl, trackingOn{
		flags:    trkOn | opts | cur&trkCaching,
		prefixes: prefixes,
		noloop:   opts&trkNoloop != 0,
		redir:    redir,
		redirID:  redirID,
	}); e != noErr {
		x.errorReply(e)
		return
	}
	x.ok()
}

// prefixCount is the number of BCAST prefixes registered, every client's.
func (t *trackTable) prefixCount() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nprefix
}

// prefixCollision is Redis 7.0's checkPrefixCollisionsOrReply for ps, the
// prefixes of one CLIENT TRACKING command, against existing, the client's
// (nil: none): the error for the first prefix ps[i] that overlaps (one
// starts with the other) an existing prefix, the first in byte order as
// Redis iterates its rax, or a later ps[j], the first such j. work counts
// tree lookups plus pairs compared: at most 3*len(ps), each lookup
// visiting at most len(p)+1 nodes down to p (then one path down to the
// first key below), where Redis compares every pair.
func prefixCollision(existing *radix.Tree, ps []string) (e wireErr, work int) {
	// first is the first i with a later ps[j] that overlaps it: walking
	// backwards, ps[i] is looked up in a tree of ps[i+1:].
	first := len(ps)
	if len(ps) > 1 {
		later := radix.New()
		for i := len(ps) - 1; i >= 0; i-- {
			work++
			if _, ok := firstOverlap(later, ps[i]); ok {
				first = i
			}
			later.Insert(ps[i], nil)
		}
	}
	for i, p := range ps {
		if i > first {
			break
		}
		if existing != nil {
			work++
			if q, ok := firstOverlap(existing, p); ok {
				return errTrackingPrefixExisting(p, q), work
			}
		}
		if i == first {
			for _, q := range ps[i+1:] {
				work++
				if prefixesOverlap(p, q) {
					return errTrackingPrefixProvided(p, q), work
				}
			}
		}
	}
	return noErr, work
}

// firstOverlap returns the first key of t in byte order that overlaps p:
// the shortest stored prefix of p (on p's path; they sort before p and
// its extensions), else the first stored key that starts with p.
func firstOverlap(t *radix.Tree, p string) (q string, ok bool) {
	t.WalkPath(p, func(k string, _ any) bool {
		q, ok = k, true
		return true
	})
	if ok {
		return q, ok
	}
	t.WalkPrefix(p, func(k string, _ any) bool {
		q, ok = k, true
		return true
	})
	return q, ok
}

// prefixesOverlap reports whether one of two BCAST prefixes starts with
// the other (Redis's stringCheckPrefix).
func prefixesOverlap(a, b string) bool {
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// CLIENT CACHING YES|NO
func cmdClientCaching(x *ctx) {
	cl := x.cl
	f := cl.track.flags.Load()
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
	cl.track.flags.Store(f | trkCaching)
	x.ok()
}

// CLIENT GETREDIR: the REDIRECT target's id while tracking (0: none),
// -1 when not tracking.
func cmdClientGetRedir(x *ctx) {
	if x.cl.track.flags.Load()&trkOn != 0 {
		x.int(x.cl.track.redirID.Load())
		return
	}
	x.int(-1)
}

// CLIENT TRACKINGINFO
func cmdClientTrackingInfo(x *ctx) {
	f := x.cl.track.flags.Load()
	var flags []string
	if f&trkOn != 0 {
		flags = append(flags, "on")
	} else {
		flags = append(flags, "off")
	}
	if f&trkBcast != 0 {
		flags = append(flags, "bcast")
	}
	for _, m := range [...]struct {
		bit           uint32
		mode, caching string // CLIENT CACHING yes in OPTIN, no in OPTOUT
	}{{trkOptin, "optin", "caching-yes"}, {trkOptout, "optout", "caching-no"}} {
		if f&m.bit != 0 {
			flags = append(flags, m.mode)
			if f&trkCaching != 0 {
				flags = append(flags, m.caching)
			}
		}
	}
	if f&trkNoloop != 0 {
		flags = append(flags, "noloop")
	}
	if f&trkOn != 0 && x.cl.track.redirBroken.Load() {
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
		x.int(x.cl.track.redirID.Load())
	} else {
		x.int(-1)
	}
	x.bulkStr("prefixes")
	// In byte order, as the tree walks them (and Redis lists them).
	var ps []string
	if x.cl.track.prefixes != nil {
		ps = make([]string, 0, x.cl.track.prefixes.Len())
		x.cl.track.prefixes.Walk(func(p string, _ any) bool {
			ps = append(ps, p)
			return false
		})
	}
	x.array(len(ps))
	for _, p := range ps {
		x.bulkStr(p)
	}
}
