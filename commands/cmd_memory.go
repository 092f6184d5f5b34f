package commands

import (
	"runtime/debug"
	"strings"
)

// MEMORY USAGE key [SAMPLES count]: the accounted bytes of the key (its
// bytes, the per-entry overhead and its object, as maxmemory counts them),
// or nil when it does not exist. SAMPLES is accepted for compatibility:
// the figure is exact for every kind.
func cmdMemoryUsage(x *ctx) {
	for j := 3; j < len(x.args); j += 2 { // as Redis: SAMPLES may repeat
		if !strings.EqualFold(string(x.args[j]), "samples") || j+1 == len(x.args) {
			x.errorReply(msgSyntax)
			return
		}
		n, ok := parseRedisInt(x.args[j+1])
		if !ok {
			x.errorReply(msgNotInt)
			return
		}
		if n < 0 {
			x.errorReply(msgSyntax)
			return
		}
	}
	k := &x.keys[0]
	n := k.sh.UsageHash(k.key, k.hash, x.clockMS())
	if n < 0 {
		x.null()
		return
	}
	x.int(n)
}

// MEMORY PURGE runs a garbage collection and returns the freed memory to
// the operating system (debug.FreeOSMemory): Redis asks its allocator to
// release dirty pages. It pauses the caller's event loop for the duration
// of a collection.
func cmdMemoryPurge(x *ctx) {
	debug.FreeOSMemory()
	x.ok()
}

func cmdMemoryHelp(x *ctx) {
	helpReply(x,
		"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"PURGE",
		"    Run a garbage collection and return freed memory to the operating system.",
		"USAGE <key> [SAMPLES <count>]",
		"    Return the memory usage of the key, as maxmemory accounts it: its bytes,",
		"    the per-key overhead and its state. SAMPLES is accepted and ignored.",
		"HELP",
		"    Prints this help.")
}
