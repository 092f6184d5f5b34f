package commands

import (
	"crypto/sha256"
	"crypto/subtle"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/resp"
)

const redisCompatVers = "7.0.15" // the Redis version whose behaviour cellserver follows

func cmdPing(x *ctx) {
	if len(x.args) <= 2 && !x.cl.resp3.Load() && x.cl.subscribed() {
		// Subscribed RESP2 mode: a reply that reads as a message.
		x.array(2)
		x.bulkStr("pong")
		if len(x.args) == 2 {
			x.bulk(x.args[1])
		} else {
			x.bulkStr("")
		}
		return
	}
	switch len(x.args) {
	case 1:
		x.status("PONG")
	case 2:
		x.bulk(x.args[1])
	default:
		x.errorReply(msgPingArgs)
	}
}

func cmdEcho(x *ctx) { x.bulk(x.args[1]) }

func cmdQuit(x *ctx) {
	x.ok()
	x.c.CloseAfterReply()
}

// setAuthed records whether the client has authenticated, and tells the
// connection, which holds a client that has not to Redis's small request
// limits (resp.Conn.SetAuthenticated).
func (cl *client) setAuthed(ok bool) {
	cl.authed = ok
	cl.conn.SetAuthenticated(ok)
}

// RESET: leave MULTI, forget watched keys and subscriptions, go back to database 0, drop
// the name, speak RESP2 again, require AUTH again if a password is set;
// reply +RESET.
func cmdReset(x *ctx) {
	cl := x.cl
	cl.resetMulti()
	cl.multiSeen.Store(-1)
	x.s.unwatchAll(cl)
	x.s.track.disable(cl)
	x.s.pubsub.drop(cl)
	cl.db.Store(0)
	cl.readonly = false
	cl.mu.Lock()
	cl.name = ""
	cl.mu.Unlock()
	cl.setAuthed(x.s.password == "")
	cl.resp3.Store(false)
	x.status("RESET")
}

// checkPassword compares pass with the configured password through their
// SHA-256 digests, in constant time: the time taken depends on neither
// the password's length nor how much of it pass gets right (comparing the
// strings themselves would return at once on a length mismatch).
func (s *Service) checkPassword(user, pass []byte) bool {
	if user != nil && string(user) != "default" {
		return false
	}
	d := sha256.Sum256(pass)
	return subtle.ConstantTimeCompare(d[:], s.passDigest[:]) == 1
}

// AUTH [username] password
func cmdAuth(x *ctx) {
	var user, pass []byte
	switch len(x.args) {
	case 2:
		pass = x.args[1]
	case 3:
		user, pass = x.args[1], x.args[2]
	default:
		x.errorReply(msgSyntax)
		return
	}
	if x.s.password == "" {
		if user == nil {
			x.errorReply(msgNoAuthNeeded)
			return
		}
		if string(user) == "default" {
			x.ok()
			return
		}
		x.errorReply(msgWrongPass)
		return
	}
	if !x.s.checkPassword(user, pass) {
		x.errorReply(msgWrongPass)
		return
	}
	x.cl.setAuthed(true)
	x.ok()
}

// HELLO [protover [AUTH username password] [SETNAME clientname]]
// HELLO 3 switches the connection to RESP3, HELLO 2 back to RESP2; HELLO
// without a version keeps the protocol. The checks come in Redis's order
// (networking.c helloCommand): the version's range, the options' syntax,
// AUTH, NOAUTH for a client that has not authenticated, the name; then
// the protocol changes and the reply, a map, is in the new protocol. A
// HELLO answered with an error changes nothing.
func cmdHello(x *ctx) {
	args := x.args[1:]
	var v int64
	if len(args) > 0 {
		var ok bool
		v, ok = parseRedisInt(args[0])
		if !ok {
			x.errorReply(msgProtoNotInt)
			return
		}
		if v != 2 && v != 3 {
			x.errorReply(msgNoProto)
			return
		}
		args = args[1:]
	}
	var name []byte
	var user, pass []byte
	for len(args) > 0 {
		switch {
		case eqFold(args[0], "auth") && len(args) >= 3:
			user, pass = args[1], args[2]
			args = args[3:]
		case eqFold(args[0], "setname") && len(args) >= 2:
			name = args[1]
			args = args[2:]
		default:
			x.errorReply(errHelloOption(args[0]))
			return
		}
	}
	if pass != nil {
		if x.s.password == "" && string(user) != "default" || x.s.password != "" && !x.s.checkPassword(user, pass) {
			x.errorReply(msgWrongPass)
			return
		}
	} else if !x.cl.authed {
		x.errorReply(msgHelloNoAuth)
		return
	}
	if pass != nil {
		x.cl.setAuthed(true)
	}
	if name != nil {
		if !validClientName(name) {
			x.errorReply(msgClientName)
			return
		}
		x.cl.mu.Lock()
		x.cl.name = string(name)
		x.cl.mu.Unlock()
	}
	if v != 0 {
		x.cl.resp3.Store(v == 3)
	}
	x.mapLen(7)
	x.bulkStr("server")
	x.bulkStr("redis")
	x.bulkStr("version")
	x.bulkStr(redisCompatVers)
	x.bulkStr("proto")
	if x.cl.resp3.Load() {
		x.int(3)
	} else {
		x.int(2)
	}
	x.bulkStr("id")
	x.int(x.c.ID())
	x.bulkStr("mode")
	x.bulkStr(x.s.redisMode())
	x.bulkStr("role")
	x.bulkStr("master")
	x.bulkStr("modules")
	x.loadedModules()
}

// validClientName is Redis's rule: printable ASCII without spaces.
func validClientName(b []byte) bool {
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

func cmdClientID(x *ctx) { x.int(x.c.ID()) }

func cmdClientSetName(x *ctx) {
	name := x.args[2]
	if !validClientName(name) {
		x.errorReply(msgClientName)
		return
	}
	x.cl.mu.Lock()
	x.cl.name = string(name)
	x.cl.mu.Unlock()
	x.ok()
}

func cmdClientGetName(x *ctx) {
	x.cl.mu.Lock()
	name := x.cl.name
	x.cl.mu.Unlock()
	if name == "" {
		x.null()
		return
	}
	x.bulkStr(name)
}

// CLIENT SETINFO LIB-NAME name | LIB-VER version
func cmdClientSetInfo(x *ctx) {
	attr, val := x.args[2], x.args[3]
	var field *string
	switch {
	case eqFold(attr, "lib-name"):
		field = &x.cl.libName
	case eqFold(attr, "lib-ver"):
		field = &x.cl.libVer
	default:
		x.errorReply(errClientInfoOption(attr))
		return
	}
	if !validClientName(val) && len(val) > 0 {
		x.errorReply(errClientInfoArg(attr))
		return
	}
	x.cl.mu.Lock()
	*field = string(val)
	x.cl.mu.Unlock()
	x.ok()
}

// CLIENT MAINT_NOTIFICATIONS ON|OFF [MOVING-ENDPOINT-TYPE type]: clients
// (go-redis over RESP3) ask for push notifications of maintenance events.
// cellserver has none to send, so a well-formed call is accepted and
// changes nothing, which keeps INFO errorstats clean after the handshake.
func cmdClientMaintNotifications(x *ctx) {
	args := x.args[2:]
	if !eqFold(args[0], "on") && !eqFold(args[0], "off") {
		x.errorReply(msgSyntax)
		return
	}
	for rest := args[1:]; len(rest) > 0; rest = rest[2:] {
		if len(rest) < 2 || !eqFold(rest[0], "moving-endpoint-type") {
			x.errorReply(msgSyntax)
			return
		}
		switch strings.ToLower(string(rest[1])) {
		case "internal-ip", "internal-fqdn", "external-ip", "external-fqdn", "none":
		default:
			x.errorReply(msgSyntax)
			return
		}
	}
	x.ok()
}

// CLIENT LIST [TYPE normal|master|replica|pubsub] | [ID id ...]
//
// As Redis 7.0: TYPE only as the sole option, or ID with one or more
// integers; each ID lists its client once per mention, in the given order.
func cmdClientList(x *ctx) {
	args := x.args[2:]
	var ids []int64
	typ := -1
	switch {
	case len(args) == 0:
	case len(args) == 2 && eqFold(args[0], "type"):
		t, ok := clientTypeByName(args[1])
		if !ok {
			x.errorReply(errClientType(args[1]))
			return
		}
		if t == clientMaster || t == clientReplica {
			x.verbatim("") // replication links are not resp clients
			return
		}
		typ = t
	case len(args) >= 2 && eqFold(args[0], "id"):
		for _, a := range args[1:] {
			n, ok := parseRedisInt(a)
			if !ok {
				x.errorReply(msgClientID)
				return
			}
			ids = append(ids, n)
		}
	default:
		x.errorReply(msgSyntax)
		return
	}
	var b strings.Builder
	now := time.Now()
	n := x.s.net.Load()
	if n == nil {
		x.verbatim("")
		return
	}
	if ids == nil {
		n.Range(func(c *resp.Conn) bool {
			if cl, _ := c.Context().(*client); cl != nil && cl.killed.Load() || typ >= 0 && (cl == nil || cl.clientType() != typ) {
				return true
			}
			writeClientInfo(&b, c, now, x)
			return true
		})
		x.verbatim(b.String())
		return
	}
	byID := map[int64]*resp.Conn{}
	n.Range(func(c *resp.Conn) bool {
		byID[c.ID()] = c
		return true
	})
	for _, id := range ids {
		if c := byID[id]; c != nil {
			writeClientInfo(&b, c, now, x)
		}
	}
	x.verbatim(b.String())
}

func cmdClientInfo(x *ctx) {
	var b strings.Builder
	writeClientInfo(&b, x.c, time.Now(), x)
	x.verbatim(b.String())
}

// connMem is what a connection costs beyond its buffers, for tot-mem: the
// connection's and the client's structures.
const connMem = int(unsafe.Sizeof(resp.Conn{})) + int(unsafe.Sizeof(client{}))

// writeClientInfo writes one CLIENT LIST line in Redis 7's field order. x
// is the command asking: its own connection's line shows the command's
// arguments (argv-mem) and the replies of the commands before it in the
// batch (obl, omem), as Redis shows them. Another connection, idle between
// commands as Redis's always are while one runs, shows argv-mem=0 and the
// reply bytes being written.
//
// Memory fields: qbuf is the input buffered, qbuf-free the rest of the
// input buffer; multi-mem is what MULTI has queued (arguments plus 24
// bytes each, as --multi-max-bytes counts); rbs is the reply buffer's
// size, and rbp too (cellserver keeps no peak). cellserver keeps pending
// replies in one buffer; they are shown as Redis would hold the same
// bytes: the first 16 KiB in its reply buffer (obl), the rest in a list
// of 16 KiB blocks (oll blocks, omem bytes). tot-mem adds the buffers, the
// arguments and the connection's own structures.
func writeClientInfo(b *strings.Builder, c *resp.Conn, now time.Time, x *ctx) {
	cl, _ := c.Context().(*client)
	if cl == nil {
		return
	}
	cl.mu.Lock()
	name, libName, libVer := cl.name, cl.libName, cl.libVer
	cl.mu.Unlock()
	cmd := "NULL"
	if sp := cl.lastCmd.Load(); sp != nil {
		cmd = sp.Name
	}
	flags := ""
	if cl.subscribed() {
		flags += "P"
	}
	multi := cl.multiSeen.Load()
	if multi >= 0 {
		flags += "x"
	}
	if cl.dirty.Load() {
		flags += "d" // a watched key changed: EXEC will fail
	}
	if flags == "" {
		flags = "N"
	}
	age := int64(now.Sub(c.Created()).Seconds())
	idle := int64(now.Sub(c.LastActive()).Seconds())
	if age < 0 {
		age = 0
	}
	if idle < 0 {
		idle = 0
	}
	qbuf := c.QueryBufLen()
	qbufFree := max(c.QueryBufCap()-qbuf, 0)
	argvMem, obl, rbs := 0, c.OutLen(), c.OutCap()
	if c == x.c {
		for _, a := range x.args {
			argvMem += len(a)
		}
		obl, rbs = len(c.Out), cap(c.Out)
	}
	obl, oll, omem := splitPending(obl)
	multiMem := int(cl.multiMem.Load())
	totMem := connMem + qbuf + qbufFree + argvMem + multiMem + rbs
	events := "r"
	if c.OutLen() > 0 {
		events = "rw"
	}
	itoa := strconv.Itoa
	proto := "2"
	if cl.resp3.Load() {
		proto = "3"
	}
	fields := []string{
		"id=" + strconv.FormatInt(c.ID(), 10),
		"addr=" + c.RemoteAddr(),
		"laddr=" + c.LocalAddr(),
		"fd=-1",
		"name=" + name,
		"age=" + strconv.FormatInt(age, 10),
		"idle=" + strconv.FormatInt(idle, 10),
		"flags=" + flags,
		"db=" + strconv.Itoa(int(cl.db.Load())),
		"sub=" + itoa(int(cl.subs.nChans.Load())),
		"psub=" + itoa(int(cl.subs.nPats.Load())),
		"ssub=0",
		"multi=" + strconv.Itoa(int(multi)),
		"qbuf=" + itoa(qbuf),
		"qbuf-free=" + itoa(qbufFree),
		"argv-mem=" + itoa(argvMem),
		"multi-mem=" + itoa(multiMem),
		"rbs=" + itoa(rbs),
		"rbp=" + itoa(rbs),
		"obl=" + itoa(obl),
		"oll=" + itoa(oll),
		"omem=" + itoa(omem),
		"tot-mem=" + itoa(totMem),
		"events=" + events,
		"cmd=" + cmd,
		"user=default", "redir=-1", "resp=" + proto,
		"lib-name=" + libName,
		"lib-ver=" + libVer,
	}
	b.WriteString(strings.Join(fields, " "))
	b.WriteByte('\n')
}

// replyChunk is Redis's PROTO_REPLY_CHUNK_BYTES: the size of its reply
// buffer and of the blocks of its reply list.
const replyChunk = 16 << 10

// splitPending shows pending reply bytes as Redis would hold them: obl in
// the reply buffer, the rest in oll list blocks of omem bytes.
func splitPending(n int) (obl, oll, omem int) {
	obl = min(n, replyChunk)
	omem = n - obl
	oll = (omem + replyChunk - 1) / replyChunk
	return obl, oll, omem
}

func cmdMulti(x *ctx) {
	if x.cl.inMulti {
		x.errorReply(msgNoMulti)
		return
	}
	x.cl.inMulti = true
	x.cl.multiSeen.Store(0)
	x.ok()
}

func cmdDiscard(x *ctx) {
	if !x.cl.inMulti {
		x.errorReply(msgDiscardNoMult)
		return
	}
	x.cl.resetMulti()
	x.cl.multiSeen.Store(-1)
	x.s.unwatchAll(x.cl)
	x.ok()
}

// The defaults of Config.MultiMaxCommands and Config.MultiMaxBytes. EXEC
// runs its queue holding every shard lock, so these bound how long one
// transaction keeps every other client waiting (about 4 ms for 10000
// CL.THROTTLE: BenchmarkExecFullQueue), as well as its memory.
const (
	DefaultMultiMaxCommands       = 10000
	DefaultMultiMaxBytes    int64 = 64 << 20
)

// queuedArgBytes is what a queued command costs beyond its arguments'
// bytes, per argument: the slice header that holds it.
const queuedArgBytes = 24

// queuedSize is what queuing args counts against Config.MultiMaxBytes:
// the arguments' bytes plus queuedArgBytes each.
func queuedSize(args [][]byte) int64 {
	n := int64(len(args)) * queuedArgBytes
	for _, a := range args {
		n += int64(len(a))
	}
	return n
}

// enqueue queues a command inside MULTI and returns noErr, or the error that
// refuses it when the queue would pass its limits. Once the transaction
// is bound to abort (multiBad), commands are answered QUEUED but not kept,
// as Redis does: EXEC will not run them.
func (s *Service) enqueue(cl *client, sp *Spec, args [][]byte) wireErr {
	if cl.multiBad {
		return noErr
	}
	if len(cl.queue) >= s.multiMax {
		return msgMultiQueueCmds
	}
	size := queuedSize(args)
	if size > s.multiBytes-cl.queueBytes {
		return msgMultiQueueBytes
	}
	cl.queueBytes += size
	cl.multiMem.Store(cl.queueBytes)
	cl.queue = append(cl.queue, queued{spec: sp, args: copyArgs(args)})
	cl.multiSeen.Store(int32(len(cl.queue)))
	return noErr
}

// EXEC runs the queued commands with the locks of every shard they touch
// held (and of the shards of the keys the client watches), so no other
// client's command can interleave with them; a client on other shards is
// not held up. A transaction with a command that needs more than its
// keys (WholeKeyspace) holds every shard lock. EXEC answers a null array
// instead when a watched key changed (see cmd_watch.go); either way the
// client's watched keys are forgotten. Each queued command runs through
// Service.call, as a command outside MULTI does, with its keys resolved
// once.
func cmdExec(x *ctx) {
	cl := x.cl
	if !cl.inMulti {
		x.errorReply(msgExecNoMulti)
		return
	}
	queue, bad := cl.queue, cl.multiBad
	cl.resetMulti()
	cl.multiSeen.Store(-1)
	if bad {
		x.s.unwatchAll(cl)
		x.errorReply(msgExecAbort)
		return
	}
	if len(queue) == 0 {
		// Nothing runs: the check needs no lock.
		broken := x.watchBroken()
		x.s.unwatchAll(cl)
		if broken {
			x.nullArray()
			return
		}
		x.array(0)
		return
	}
	whole := false
	for _, q := range queue {
		if q.spec.Flags&WholeKeyspace != 0 {
			whole = true
			break
		}
	}
	var keys []execKey // every queued command's keys, in queue order
	if whole {
		x.s.ks.LockAll()
		defer x.s.ks.UnlockAll()
		if cl.noloop {
			cl.heldAll.Store(true)
			defer cl.heldAll.Store(false)
		}
	} else {
		var shards []*keyspace.Shard
		keys, shards = x.resolveQueue(queue)
		// Cluster mode checks the queued commands' slots (execKey.slot)
		// again here, before the locks are taken.
		x.lockShards(shards)
		defer x.unlockShards()
	}
	if len(cl.watched) > 0 {
		broken := x.watchBroken()
		x.s.unwatchAll(cl)
		if broken {
			x.nullArray()
			return
		}
	}
	x.array(len(queue))
	outer := *x
	x.locked, x.inExec = whole, true
	for _, q := range queue {
		x.args = q.args
		if whole {
			// SELECT may have changed the database: resolved as it runs.
			x.resolveKeys(q.spec, x.db())
		} else {
			// Their hashes (and slots) as resolveQueue found them.
			if q.nkeys > 0 {
				x.pre, keys = keys[:q.nkeys], keys[q.nkeys:]
			}
			x.resolveKeys(q.spec, x.db())
			x.pre = nil // used up
		}
		x.s.call(x, q.spec)
	}
	x.args, x.spec, x.failed, x.locked, x.inExec = outer.args, outer.spec, false, false, false
	x.keys, x.locks, x.heldSet = outer.keys, outer.locks, outer.heldSet
}

// execKey is a queued command's key as EXEC resolved it (resolveQueue),
// without its bytes and shard, which the hash finds again as the command
// runs: a buffer without pointers costs the garbage collector nothing.
type execKey struct {
	hash uint64
	slot uint16
}

// resolveQueue resolves the keys of a transaction's commands (none needs
// the whole keyspace, so all run in the current database), recording
// each command's count in its nkeys. It returns their hashes, in queue
// order, and the shards to lock, each once, in the lock order: those of
// the keys, and those of the keys the client watches, so that a change to
// a watched key is either before EXEC's check or after the transaction.
func (x *ctx) resolveQueue(queue []queued) ([]execKey, []*keyspace.Shard) {
	cl := x.cl
	db := x.db()
	if cap(cl.execKeys) < len(queue) {
		cl.execKeys = make([]execKey, 0, len(queue)) // one key a command, as a rule
	}
	all := cl.execKeys[:0]
	shards := cl.lockMore[:0]
	marks := db.NumShards() <= markedShards
	if w := (db.NumShards() + 63) / 64; marks && len(cl.marks) < w {
		cl.marks = make([]uint64, w)
	}
	args := x.args
	for i := range queue {
		q := &queue[i]
		var one [1]rkey
		keys := x.keys[:0]
		if sp := q.spec; sp.FirstKey > 0 && sp.FirstKey == sp.LastKey && sp.Keys == nil && sp.derive == nil {
			// One key, in short (as resolveKeys).
			if sp.FirstKey < len(q.args) {
				x.setKey(&one[0], db, q.args[sp.FirstKey])
				keys = one[:]
			}
		} else {
			x.args = q.args
			x.resolveKeys(sp, db)
			keys = x.keys
		}
		q.nkeys = len(keys)
		for j := range keys {
			k := &keys[j]
			all = append(all, execKey{hash: k.hash, slot: k.slot})
			if !marks {
				shards = append(shards, k.sh)
				continue
			}
			// One entry per shard, so that sorting takes at most a
			// database's shards, however many keys.
			_, s := k.sh.Order()
			if bit := uint64(1) << (s % 64); cl.marks[s/64]&bit == 0 {
				cl.marks[s/64] |= bit
				shards = append(shards, k.sh)
			}
		}
	}
	if marks {
		for _, sh := range shards {
			_, s := sh.Order()
			cl.marks[s/64] = 0
		}
	}
	for _, wk := range cl.watched {
		shards = append(shards, x.s.ks.DB(wk.db).Shard([]byte(wk.key)))
	}
	cl.execKeys, cl.lockMore, cl.bigKeys = all, shards, true
	x.args, x.keys = args, nil
	return all, orderShards(shards)
}
