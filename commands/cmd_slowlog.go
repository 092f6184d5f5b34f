package commands

import (
	"strconv"
	"sync"
	"time"
)

// slowlog keeps the most recent commands that took at least the configured
// time, as Redis's SLOWLOG does: at most maxLen entries, arguments cut to
// 32 and each to 128 bytes, so its memory is bounded.
type slowlog struct {
	slowerThan time.Duration // < 0: off
	maxLen     int

	mu      sync.Mutex  // guards entries, nextID
	entries []slowEntry // newest first
	nextID  int64
}

type slowEntry struct {
	id       int64
	at       int64 // unix seconds
	micros   int64
	args     []string
	addr     string
	clientNm string
}

const (
	slowlogMaxArgc   = 32
	slowlogMaxArgLen = 128
)

// redacted replaces a secret argument in the SLOWLOG, as in Redis 7.
const redacted = "(redacted)"

// redactors say which arguments of a command are secrets (by position in
// args, the command name at 0), as Redis's redactClientCommandArgument
// calls do: AUTH's username and password (every argument here, also in a
// malformed call), HELLO's AUTH username and password, and the value of
// a sensitive parameter given to CONFIG SET.
var redactors = map[string]func(args [][]byte, secret []bool){
	"auth": func(args [][]byte, secret []bool) {
		for i := 1; i < len(args); i++ {
			secret[i] = true
		}
	},
	"hello": func(args [][]byte, secret []bool) {
		for i := 2; i < len(args); i++ {
			if eqFold(args[i], "auth") {
				for j := i + 1; j <= i+2 && j < len(args); j++ {
					secret[j] = true
				}
				i += 2
			}
		}
	},
	// ACL SETUSER: the name and every rule (passwords among them).
	"acl|setuser": func(args [][]byte, secret []bool) {
		for i := 2; i < len(args); i++ {
			secret[i] = true
		}
	},
	"config|set": func(args [][]byte, secret []bool) {
		for i := 2; i+1 < len(args); i += 2 {
			if sensitiveConfig(args[i]) {
				secret[i+1] = true
			}
		}
	},
}

// secretArgs reports which of args, a call of sp, are secrets, to be
// shown as "(redacted)" wherever commands are shown (SLOWLOG, MONITOR);
// nil when none is.
func secretArgs(sp *Spec, args [][]byte) []bool {
	r := redactors[sp.Name]
	if r == nil {
		return nil
	}
	secret := make([]bool, len(args))
	r(args, secret)
	return secret
}

// sensitiveConfig reports whether a configuration parameter holds a
// secret (Redis's SENSITIVE_CONFIG parameters).
func sensitiveConfig(name []byte) bool {
	for _, n := range []string{"requirepass", "masterauth", "tls-key-file-pass", "tls-client-key-file-pass"} {
		if eqFold(name, n) {
			return true
		}
	}
	return false
}

func (l *slowlog) maybeAdd(x *ctx, d time.Duration) {
	if l.slowerThan < 0 || d < l.slowerThan || x.spec.Flags&SkipSlowlog != 0 {
		return
	}
	secret := secretArgs(x.spec, x.args)
	argc := min(len(x.args), slowlogMaxArgc)
	args := make([]string, 0, argc)
	for i := 0; i < argc; i++ {
		a := x.args[i]
		if secret != nil && secret[i] {
			a = []byte(redacted)
		}
		if i == slowlogMaxArgc-1 && len(x.args) > slowlogMaxArgc {
			args = append(args, "... ("+strconv.Itoa(len(x.args)-slowlogMaxArgc+1)+" more arguments)")
			break
		}
		if len(a) > slowlogMaxArgLen {
			args = append(args, string(a[:slowlogMaxArgLen])+"... ("+strconv.Itoa(len(a)-slowlogMaxArgLen)+" more bytes)")
			continue
		}
		args = append(args, string(a))
	}
	x.cl.meta.mu.Lock()
	name := x.cl.meta.name
	x.cl.meta.mu.Unlock()
	l.mu.Lock()
	e := slowEntry{id: l.nextID, at: time.Now().Unix(), micros: d.Microseconds(), args: args, addr: x.c.RemoteAddr(), clientNm: name}
	l.nextID++
	l.entries = append([]slowEntry{e}, l.entries...)
	if len(l.entries) > l.maxLen {
		l.entries = l.entries[:l.maxLen]
	}
	l.mu.Unlock()
}

// SLOWLOG GET [count]: count defaults to 10; -1 returns every entry.
func cmdSlowlogGet(x *ctx) {
	count := int64(10)
	if len(x.args) > 3 { // Redis: only SLOWLOG GET [count]
		x.errorReply(errSubcommandSyntax(cstr(x.args[1]), "slowlog"))
		return
	}
	if len(x.args) == 3 {
		n, ok := parseRedisInt(x.args[2])
		if !ok || n < -1 {
			x.errorReply(msgSlowlogCount)
			return
		}
		count = n
	}
	l := &x.s.slowlog
	l.mu.Lock()
	entries := l.entries
	if count >= 0 && int64(len(entries)) > count {
		entries = entries[:count]
	}
	entries = append([]slowEntry(nil), entries...)
	l.mu.Unlock()
	x.array(len(entries))
	for _, e := range entries {
		x.array(6)
		x.int(e.id)
		x.int(e.at)
		x.int(e.micros)
		x.array(len(e.args))
		for _, a := range e.args {
			x.bulkStr(a)
		}
		x.bulkStr(e.addr)
		x.bulkStr(e.clientNm)
	}
}

func cmdSlowlogLen(x *ctx) {
	l := &x.s.slowlog
	l.mu.Lock()
	n := len(l.entries)
	l.mu.Unlock()
	x.int(int64(n))
}

func cmdSlowlogReset(x *ctx) {
	l := &x.s.slowlog
	l.mu.Lock()
	l.entries = nil
	l.mu.Unlock()
	x.ok()
}

func cmdSlowlogHelp(x *ctx) {
	helpReply(x,
		"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GET [<count>]",
		"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
		"    Entries are made of:",
		"    id, timestamp, time in microseconds, arguments array, client IP and port,",
		"    client name",
		"LEN",
		"    Return the length of the slowlog.",
		"RESET",
		"    Reset the slowlog.",
		"HELP",
		"    Prints this help.")
}
