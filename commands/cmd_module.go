package commands

import "strings"

// The module cellserver stands in for: MODULE LIST, HELLO and INFO modules
// report it as Redis reports redis-cell once loaded, so a client that
// checks for redis-cell finds it.
const (
	cellModuleName = "redis-cell"
	cellModuleVer  = 1
)

// loadedModules writes Redis's addReplyLoadedModules: one map per module
// with name, ver, path and args (RESP2: a flat array of the pairs). The
// path is cellserver's executable, which holds the module's commands.
func (x *ctx) loadedModules() {
	x.array(1)
	x.mapLen(4)
	x.bulkStr("name")
	x.bulkStr(cellModuleName)
	x.bulkStr("ver")
	x.int(cellModuleVer)
	x.bulkStr("path")
	x.bulkStr(executable())
	x.bulkStr("args")
	x.array(0)
}

func cmdModuleList(x *ctx) { x.loadedModules() }

// MODULE LOAD, LOADEX and UNLOAD: cellserver's commands are built in.
func cmdModuleLoad(x *ctx) {
	sub := strings.ToUpper(strings.TrimPrefix(x.spec.Name, "module|"))
	x.errorReply(errModuleBuiltIn(sub))
}

func cmdModuleHelp(x *ctx) {
	helpReply(x,
		"MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"LIST",
		"    Return a list of loaded modules.",
		"LOAD <path> [<arg> ...]",
		"    Not supported: cellserver loads no modules.",
		"LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
		"    Not supported: cellserver loads no modules.",
		"UNLOAD <name>",
		"    Not supported: redis-cell's commands are built in.",
		"HELP",
		"    Prints this help.")
}
