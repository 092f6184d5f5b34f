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

func (l *slowlog) maybeAdd(x *ctx, d time.Duration) {
	if l.slowerThan < 0 || d < l.slowerThan {
		return
	}
	argc := min(len(x.args), slowlogMaxArgc)
	args := make([]string, 0, argc)
	for i := 0; i < argc; i++ {
		a := x.args[i]
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
	x.cl.mu.Lock()
	name := x.cl.name
	x.cl.mu.Unlock()
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
			x.errorReply("ERR count should be greater than or equal to -1")
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
