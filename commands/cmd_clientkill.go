package commands

import (
	"strings"
	"time"

	"github.com/cellserver/cellserver/resp"
)

// Client types of CLIENT KILL TYPE and CLIENT LIST TYPE (Redis's
// getClientTypeByName).
const (
	clientNormal = iota
	clientReplica
	clientPubsub
	clientMaster
)

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
	id          int64 // 0: any
	maxAge      int64 // seconds; 0: any
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
				if string(v) != "default" {
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
		if f.id != 0 || f.hasAddr || f.hasLaddr || f.maxAge != 0 || s.killRepl == nil {
			return 0, false
		}
		kind := "replica"
		if f.typ == clientMaster {
			kind = "master"
		}
		return int64(s.killRepl(kind)), false
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
