package commands

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cellserver/cellserver/resp"
)

func cmdPing(x *ctx) {
	if len(x.args) <= 2 && !x.cl.resp3() && x.cl.subscribed() {
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
	cl.multi.seen.Store(-1)
	x.s.unwatchAll(cl)
	x.s.track.disable(cl)
	x.s.pubsub.drop(cl)
	x.s.dropMonitor(cl)
	cl.db.Store(0)
	cl.readonly = false
	cl.meta.mu.Lock()
	cl.meta.name = ""
	cl.meta.mu.Unlock()
	cl.user.Store(x.s.acl.def)
	cl.setAuthed(!x.s.authRequired())
	cl.conn.SetProtocol(resp.RESP2)
	x.status("RESET")
}

// authConfig is what protected mode checks.
type authConfig struct {
	password  string            // requirepass: the default user's password at start
	protected bool              // protected mode (Config.ProtectedMode)
	loopback  func(string) bool // Config.Loopback, or isLoopback
}

// AUTH [username] password
// As Redis 7.0 (acl.c authCommand): the one-argument form authenticates
// the default user, and is an error while that user is nopass.
func cmdAuth(x *ctx) {
	var user, pass []byte
	switch len(x.args) {
	case 2:
		if x.s.acl.def.state.Load().nopass {
			x.errorReply(msgNoAuthNeeded)
			return
		}
		user, pass = []byte("default"), x.args[1]
	case 3:
		user, pass = x.args[1], x.args[2]
	default:
		x.errorReply(msgSyntax)
		return
	}
	if !x.s.authenticate(x, user, pass) {
		x.errorReply(msgWrongPass)
		return
	}
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
		if !x.s.authenticate(x, user, pass) {
			x.errorReply(msgWrongPass)
			return
		}
	} else if !x.cl.authed {
		x.errorReply(msgHelloNoAuth)
		return
	}
	if name != nil && !x.cl.setName(name) {
		x.errorReply(msgClientName)
		return
	}
	if v != 0 {
		x.c.SetProtocol(resp.Protocol(v))
	}
	x.mapLen(7)
	x.bulkStr("server")
	x.bulkStr("redis")
	x.bulkStr("version")
	x.bulkStr(x.s.redisVersion)
	x.bulkStr("proto")
	if x.cl.resp3() {
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

// clientMeta is what a client says about itself (CLIENT SETNAME, HELLO
// SETNAME, CLIENT SETINFO), read by CLIENT LIST and INFO.
type clientMeta struct {
	// mu guards name, libName, libVer for other clients' readers. They
	// are written only by the client's own commands, which may read them
	// without it (ctx.auditClient).
	mu      sync.Mutex
	name    string
	libName string
	libVer  string
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
	if !x.cl.setName(x.args[2]) {
		x.errorReply(msgClientName)
		return
	}
	x.ok()
}

// setName sets the client's name (CLIENT SETNAME, HELLO SETNAME) unless
// Redis's rule refuses it (then it returns false).
func (cl *client) setName(name []byte) bool {
	if !validClientName(name) {
		return false
	}
	cl.meta.mu.Lock()
	cl.meta.name = string(name)
	cl.meta.mu.Unlock()
	return true
}

func cmdClientGetName(x *ctx) {
	x.cl.meta.mu.Lock()
	name := x.cl.meta.name
	x.cl.meta.mu.Unlock()
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
		field = &x.cl.meta.libName
	case eqFold(attr, "lib-ver"):
		field = &x.cl.meta.libVer
	default:
		x.errorReply(errClientInfoOption(attr))
		return
	}
	if !validClientName(val) && len(val) > 0 {
		x.errorReply(errClientInfoArg(attr))
		return
	}
	x.cl.meta.mu.Lock()
	*field = string(val)
	x.cl.meta.mu.Unlock()
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
	cl.meta.mu.Lock()
	name, libName, libVer := cl.meta.name, cl.meta.libName, cl.meta.libVer
	cl.meta.mu.Unlock()
	cmd := "NULL"
	if sp := cl.lastCmd.Load(); sp != nil {
		cmd = sp.Name
	}
	flags := ""
	if x.s.monitors.has(cl) {
		flags += "O" // Redis: a monitor
	}
	if cl.subscribed() {
		flags += "P"
	}
	multi := cl.multi.seen.Load()
	if multi >= 0 {
		flags += "x"
	}
	if cl.multi.dirty.Load() {
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
	multiMem := int(cl.multi.mem.Load())
	totMem := connMem + qbuf + qbufFree + argvMem + multiMem + rbs
	events := "r"
	if c.OutLen() > 0 {
		events = "rw"
	}
	itoa := strconv.Itoa
	proto := "2"
	if cl.resp3() {
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
		"sub=" + itoa(int(cl.pubsub.nChans.Load())),
		"psub=" + itoa(int(cl.pubsub.nPats.Load())),
		"ssub=" + itoa(int(cl.pubsub.nShard.Load())),
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
		"user=" + cl.user.Load().name, "redir=-1", "resp=" + proto,
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

// clientTypeByName parses a client type, case-insensitively; ok is false
// for an unknown one.
func clientTypeByName(b []byte) (typ int, ok bool) {
	switch strings.ToLower(string(b)) {
	case "normal":
		return clientNormal, true
	case "slave", "replica":
		return clientReplica, true
	case "pubsub":
		return clientPubsub, true
	case "master":
		return clientMaster, true
	}
	return 0, false
}

// clientType is the type of a resp client: pubsub while subscribed,
// normal otherwise. Replication links are not resp clients.
func (cl *client) clientType() int {
	if cl.subscribed() {
		return clientPubsub
	}
	return clientNormal
}

// killFilter is what CLIENT KILL matches; every field set must match.
type killFilter struct {
	addr, laddr string
	hasAddr     bool
	hasLaddr    bool
	typ         int
	hasType     bool
	id          int64    // 0: any
	maxAge      int64    // seconds; 0: any
	user        *aclUser // nil: any
	skipMe      bool
}

// CLIENT KILL ip:port
// CLIENT KILL [ID id] [TYPE normal|master|replica|slave|pubsub] [ADDR
// ip:port] [LADDR ip:port] [USER username] [SKIPME yes|no] [MAXAGE secs]
//
// As Redis 7.0 (networking.c clientCommand): the old form kills the
// client at that address, the caller included, and answers +OK or "No
// such client"; the filter form kills every client matching all its
// filters, skipping the caller unless SKIPME no, and answers the count.
// The caller itself, when killed, gets its reply first (CloseAfterReply),
// so a CLIENT KILL inside MULTI still delivers the EXEC reply. MAXAGE
// (Redis 7.4: only clients connected for more than that many seconds) is
// accepted too. TYPE master and replica reach the replication links
// through Config.KillReplicationLinks: those links are not resp clients,
// so the ID, ADDR, LADDR and MAXAGE filters never match them.
func cmdClientKill(x *ctx) {
	f := killFilter{skipMe: true}
	args := x.args[2:]
	if len(args) == 1 {
		f.addr, f.hasAddr, f.skipMe = string(args[0]), true, false
	} else {
		for i := 0; i < len(args); i += 2 {
			if i+1 >= len(args) {
				x.errorReply(msgSyntax)
				return
			}
			v := args[i+1]
			switch strings.ToLower(string(args[i])) {
			case "id":
				n, ok := parseRedisInt(v)
				if !ok || n < 1 {
					x.errorReply(msgClientKillID)
					return
				}
				f.id = n
			case "type":
				typ, ok := clientTypeByName(v)
				if !ok {
					x.errorReply(errClientType(v))
					return
				}
				f.typ, f.hasType = typ, true
			case "addr":
				f.addr, f.hasAddr = string(v), true
			case "laddr":
				f.laddr, f.hasLaddr = string(v), true
			case "user":
				x.s.acl.mu.Lock()
				f.user = x.s.acl.users[string(v)]
				x.s.acl.mu.Unlock()
				if f.user == nil {
					x.errorReply(errNoSuchUser(v))
					return
				}
			case "skipme":
				switch {
				case eqFold(v, "yes"):
					f.skipMe = true
				case eqFold(v, "no"):
					f.skipMe = false
				default:
					x.errorReply(msgSyntax)
					return
				}
			case "maxage":
				n, ok := parseRedisInt(v)
				if !ok || n < 0 {
					x.errorReply(msgClientKillMaxAge)
					return
				}
				f.maxAge = n
			default:
				x.errorReply(msgSyntax)
				return
			}
		}
	}
	killed, self := x.s.killClients(x, f)
	if len(args) == 1 {
		if killed == 0 {
			x.errorReply(msgNoSuchClient)
		} else {
			x.ok()
		}
	} else {
		x.int(killed)
	}
	if self {
		x.c.CloseAfterReply()
	}
}

// killClients closes the clients f matches and returns how many it
// matched; self reports that the caller is among them (it is closed
// after its reply, by the caller).
func (s *Service) killClients(x *ctx, f killFilter) (killed int64, self bool) {
	if f.hasType && (f.typ == clientMaster || f.typ == clientReplica) {
		if f.id != 0 || f.hasAddr || f.hasLaddr || f.maxAge != 0 || f.user != nil || s.repl.killLinks == nil {
			return 0, false
		}
		kind := "replica"
		if f.typ == clientMaster {
			kind = "master"
		}
		return int64(s.repl.killLinks(kind)), false
	}
	n := s.net.Load()
	if n == nil {
		return 0, false
	}
	now := time.Now()
	var victims []*resp.Conn
	n.Range(func(c *resp.Conn) bool {
		cl, _ := c.Context().(*client)
		if cl == nil || cl.killed.Load() || cl.closed.Load() {
			return true
		}
		switch {
		case f.hasAddr && c.RemoteAddr() != f.addr,
			f.hasLaddr && c.LocalAddr() != f.laddr,
			f.hasType && cl.clientType() != f.typ,
			f.id != 0 && c.ID() != f.id,
			f.maxAge != 0 && int64(now.Sub(c.Created())/time.Second) <= f.maxAge,
			f.user != nil && cl.user.Load() != f.user,
			c == x.c && f.skipMe:
			return true
		}
		victims = append(victims, c)
		return true
	})
	for _, c := range victims {
		if c == x.c {
			self = true
			continue
		}
		cl := c.Context().(*client)
		if !cl.killed.CompareAndSwap(false, true) {
			continue // another CLIENT KILL got it first
		}
		killed++
		c.Kill()
		// As Redis frees the client at once, its subscriptions end now,
		// not when its connection's goroutine gets to Service.Close.
		s.pubsub.drop(cl)
	}
	if self {
		killed++
	}
	return killed, self
}

func cmdClientHelp(x *ctx) {
	helpReply(x,
		"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GETNAME",
		"    Return the name of the current connection.",
		"ID",
		"    Return the ID of the current connection.",
		"INFO",
		"    Return information about the current client connection.",
		"KILL <ip:port>",
		"    Kill connection made from <ip:port>.",
		"KILL <option> <value> [<option> <value> [...]]",
		"    Kill connections. Options are:",
		"    * ADDR (<ip:port>|<unixsocket>:0)",
		"      Kill connections made from the specified address",
		"    * LADDR (<ip:port>|<unixsocket>:0)",
		"      Kill connections made to specified local address",
		"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
		"      Kill connections by type.",
		"    * USER <username>",
		"      Kill connections authenticated by <username>.",
		"    * SKIPME (YES|NO)",
		"      Skip killing current connection (default: yes).",
		"LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB)] [ID <id> [<id> ...]]",
		"    Return information about client connections.",
		"SETINFO <option> <value>",
		"    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
		"SETNAME <name>",
		"    Assign the name <name> to the current connection.",
		"HELP",
		"    Prints this help.")
}

func cmdSelect(x *ctx) {
	n, ok := parseRedisInt(x.args[1])
	if !ok {
		x.errorReply(msgNotInt)
		return
	}
	if n < math.MinInt32 || n > math.MaxInt32 { // Redis reads an int first
		x.errorReply(msgIntRange)
		return
	}
	if x.s.cluster.state != nil && n != 0 {
		x.errorReply(msgSelectCluster)
		return
	}
	if n < 0 || n >= int64(x.s.ks.NumDB()) {
		x.errorReply(msgDBIndex)
		return
	}
	x.cl.db.Store(int32(n))
	x.ok()
}

// Client types of CLIENT KILL TYPE and CLIENT LIST TYPE (Redis's
// getClientTypeByName).
const (
	clientNormal = iota
	clientReplica
	clientPubsub
	clientMaster
)
