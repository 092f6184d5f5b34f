package commands

import (
	"crypto/sha256"
	"crypto/subtle"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/resp"
)

const (
	msgNoAuth       = "NOAUTH Authentication required."
	msgWrongPass    = "WRONGPASS invalid username-password pair or user is disabled."
	msgNotInMulti   = "ERR Command not allowed inside a transaction"
	msgPingArgs     = "ERR wrong number of arguments for 'ping' command"
	redisCompatVers = "7.0.15" // the Redis version whose behaviour cellserver follows
)

func cmdPing(x *ctx) {
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

// RESET: leave MULTI, forget watched keys, go back to database 0, drop
// the name, require AUTH again if a password is set; reply +RESET.
func cmdReset(x *ctx) {
	cl := x.cl
	cl.resetMulti()
	cl.multiSeen.Store(-1)
	x.s.unwatchAll(cl)
	cl.db.Store(0)
	cl.mu.Lock()
	cl.name = ""
	cl.mu.Unlock()
	cl.setAuthed(x.s.password == "")
	x.status("RESET")
}

// checkPassword compares pass with the configured password through their
// SHA-256 digests, in constant time: the time taken depends on neither
// the password's length nor how much of it pass gets right (comparing the
// strings themselves would return at once on a length mismatch).
func (s *Server) checkPassword(user, pass []byte) bool {
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
// Only RESP2 is spoken; HELLO 3 gets -NOPROTO, so clients fall back.
func cmdHello(x *ctx) {
	args := x.args[1:]
	if len(args) > 0 {
		v, ok := parseRedisInt(args[0])
		if !ok {
			x.errorReply(msgProtoNotInt)
			return
		}
		if v != 2 {
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
			x.errorReply("ERR Syntax error in HELLO option '" + string(args[0]) + "'")
			return
		}
	}
	if pass != nil {
		if x.s.password == "" && string(user) != "default" || x.s.password != "" && !x.s.checkPassword(user, pass) {
			x.errorReply(msgWrongPass)
			return
		}
		x.cl.setAuthed(true)
	}
	if !x.cl.authed {
		x.errorReply(msgHelloNoAuth)
		return
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
	x.array(14)
	x.bulkStr("server")
	x.bulkStr("redis")
	x.bulkStr("version")
	x.bulkStr(redisCompatVers)
	x.bulkStr("proto")
	x.int(2)
	x.bulkStr("id")
	x.int(x.c.ID())
	x.bulkStr("mode")
	x.bulkStr("standalone")
	x.bulkStr("role")
	x.bulkStr("master")
	x.bulkStr("modules")
	x.array(0)
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
		x.errorReply("ERR Unrecognized option '" + string(attr) + "'")
		return
	}
	if !validClientName(val) && len(val) > 0 {
		x.errorReply(strings.Replace(msgClientInfoArg, "%s", strings.ToLower(string(attr)), 1))
		return
	}
	x.cl.mu.Lock()
	*field = string(val)
	x.cl.mu.Unlock()
	x.ok()
}

// CLIENT LIST [TYPE normal|master|replica|pubsub] | [ID id ...]
//
// As Redis 7.0: TYPE only as the sole option, or ID with one or more
// integers; each ID lists its client once per mention, in the given order.
func cmdClientList(x *ctx) {
	args := x.args[2:]
	var ids []int64
	switch {
	case len(args) == 0:
	case len(args) == 2 && eqFold(args[0], "type"):
		switch strings.ToLower(string(args[1])) {
		case "normal": // every cellserver client is a normal one
		case "master", "replica", "slave", "pubsub":
			x.bulkStr("") // cellserver has only normal clients
			return
		default:
			x.errorReply(strings.Replace(msgClientType, "%s", cstr(args[1]), 1))
			return
		}
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
		x.bulkStr("")
		return
	}
	if ids == nil {
		n.Range(func(c *resp.Conn) bool {
			writeClientInfo(&b, c, now)
			return true
		})
		x.bulkStr(b.String())
		return
	}
	byID := map[int64]*resp.Conn{}
	n.Range(func(c *resp.Conn) bool {
		byID[c.ID()] = c
		return true
	})
	for _, id := range ids {
		if c := byID[id]; c != nil {
			writeClientInfo(&b, c, now)
		}
	}
	x.bulkStr(b.String())
}

func cmdClientInfo(x *ctx) {
	var b strings.Builder
	writeClientInfo(&b, x.c, time.Now())
	x.bulkStr(b.String())
}

// writeClientInfo writes one CLIENT LIST line in Redis 7's field order.
func writeClientInfo(b *strings.Builder, c *resp.Conn, now time.Time) {
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
		"sub=0", "psub=0", "ssub=0",
		"multi=" + strconv.Itoa(int(multi)),
		"qbuf=" + strconv.Itoa(c.QueryBufLen()),
		"qbuf-free=0", "argv-mem=0", "multi-mem=0", "rbs=0", "rbp=0",
		"obl=0", "oll=0",
		"omem=" + strconv.Itoa(c.OutLen()),
		"tot-mem=0", "events=r",
		"cmd=" + cmd,
		"user=default", "redir=-1", "resp=2",
		"lib-name=" + libName,
		"lib-ver=" + libVer,
	}
	b.WriteString(strings.Join(fields, " "))
	b.WriteByte('\n')
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

// enqueue queues a command inside MULTI and returns "", or the error that
// refuses it when the queue would pass its limits. Once the transaction
// is bound to abort (multiBad), commands are answered QUEUED but not kept,
// as Redis does: EXEC will not run them.
func (s *Server) enqueue(cl *client, sp *Spec, args [][]byte) string {
	if cl.multiBad {
		return ""
	}
	if len(cl.queue) >= s.multiMax {
		return msgMultiQueueCmds
	}
	size := queuedSize(args)
	if size > s.multiBytes-cl.queueBytes {
		return msgMultiQueueBytes
	}
	cl.queueBytes += size
	cl.queue = append(cl.queue, queued{spec: sp, args: copyArgs(args)})
	cl.multiSeen.Store(int32(len(cl.queue)))
	return ""
}

// EXEC runs the queued commands with every shard lock held, so no other
// client's command can interleave with them. It answers a null array
// instead when a watched key changed (see cmd_watch.go); either way the
// client's watched keys are forgotten.
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
	x.s.ks.LockAll()
	defer x.s.ks.UnlockAll()
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
	for _, q := range queue {
		x.args = q.args
		x.locked = true
		x.s.call(x, q.spec)
	}
	x.args, x.spec, x.failed, x.locked = outer.args, outer.spec, false, false
}
