package commands

import (
	"bytes"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/glob"
)

// COMMAND with no subcommand: the info of every top-level command.
func cmdCommand(x *ctx) {
	names := x.s.topNames()
	x.array(len(names))
	for _, n := range names {
		x.commandInfo(x.s.table[n])
	}
}

func (s *Service) topNames() []string {
	names := make([]string, 0, len(s.table))
	for n := range s.table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func cmdCommandCount(x *ctx) { x.int(int64(len(x.s.table))) }

// COMMAND INFO [command-name ...]
func cmdCommandInfo(x *ctx) {
	if len(x.args) == 2 {
		cmdCommand(x)
		return
	}
	x.array(len(x.args) - 2)
	for _, a := range x.args[2:] {
		sp := x.s.findSpec(a)
		if sp == nil {
			x.null() // Redis 7.0 answers a null bulk string here
			continue
		}
		x.commandInfo(sp)
	}
}

// findSpec resolves "name" or "container|sub", ignoring case.
func (s *Service) findSpec(name []byte) *Spec {
	n := strings.ToLower(string(name))
	if i := strings.IndexByte(n, '|'); i >= 0 {
		parent := s.table[n[:i]]
		if parent == nil || parent.subs == nil {
			return nil
		}
		return parent.subs[n[i+1:]]
	}
	return s.table[n]
}

// commandInfo writes Redis 7's 10-element COMMAND INFO entry.
func (x *ctx) commandInfo(sp *Spec) {
	x.array(10)
	x.bulkStr(sp.Name)
	x.int(int64(sp.Arity))
	var flags []string
	for _, f := range flagNames {
		if sp.Flags&f.f != 0 {
			flags = append(flags, f.name)
		}
	}
	x.setLen(len(flags))
	for _, f := range flags {
		x.status(f)
	}
	x.int(int64(sp.FirstKey))
	x.int(int64(sp.LastKey))
	x.int(int64(sp.Step))
	x.setLen(len(sp.ACL))
	for _, c := range sp.ACL {
		x.status("@" + c)
	}
	x.setLen(len(sp.Tips))
	for _, t := range sp.Tips {
		x.bulkStr(t)
	}
	x.keySpecs(sp)
	if len(sp.Subs) == 0 {
		x.setLen(0) // as Redis: an empty set, subcommands an array
		return
	}
	x.array(len(sp.Subs))
	for _, sub := range sp.Subs {
		x.commandInfo(sub)
	}
}

// keySpecs writes the key specs derived from the legacy key positions: one
// spec of type index/range, as Redis reports for a command registered with
// firstkey/lastkey/keystep, or two single-key ones with KeyFlags2.
func (x *ctx) keySpecs(sp *Spec) {
	if kw := sp.KeyKeyword; kw != nil {
		x.setLen(1)
		x.keySpecKeyword(sp.KeyFlags, kw)
		return
	}
	if sp.FirstKey == 0 {
		x.setLen(0)
		return
	}
	if sp.KeyFlags2 != nil {
		x.setLen(2)
		x.keySpec(sp.KeyFlags, sp.FirstKey, 0, 1)
		x.keySpec(sp.KeyFlags2, sp.FirstKey+1, 0, 1)
		return
	}
	x.setLen(1)
	last := sp.LastKey
	if last > 0 {
		last -= sp.FirstKey
	}
	x.keySpecNotes(sp.KeyNotes, sp.KeyFlags, sp.FirstKey, last, sp.Step)
}

// keySpec writes one key spec of type index/range.
func (x *ctx) keySpec(flags []string, index, last, step int) {
	x.keySpecNotes("", flags, index, last, step)
}

// keySpecKeyword writes one key spec of type keyword/range.
func (x *ctx) keySpecKeyword(flags []string, kw *KeywordSpec) {
	x.mapLen(3)
	x.bulkStr("flags")
	x.setLen(len(flags))
	for _, f := range flags {
		x.status(f)
	}
	x.bulkStr("begin_search")
	x.mapLen(2)
	x.bulkStr("type")
	x.bulkStr("keyword")
	x.bulkStr("spec")
	x.mapLen(2)
	x.bulkStr("keyword")
	x.bulkStr(kw.Keyword)
	x.bulkStr("startfrom")
	x.int(int64(kw.StartFrom))
	x.bulkStr("find_keys")
	x.mapLen(2)
	x.bulkStr("type")
	x.bulkStr("range")
	x.bulkStr("spec")
	x.mapLen(3)
	x.bulkStr("lastkey")
	x.int(int64(kw.LastKey))
	x.bulkStr("keystep")
	x.int(int64(kw.Step))
	x.bulkStr("limit")
	x.int(int64(kw.Limit))
}

// keySpecNotes is keySpec with the spec's notes, when not empty.
func (x *ctx) keySpecNotes(notes string, flags []string, index, last, step int) {
	if notes != "" {
		x.mapLen(4)
		x.bulkStr("notes")
		x.bulkStr(notes)
	} else {
		x.mapLen(3)
	}
	x.bulkStr("flags")
	x.setLen(len(flags))
	for _, f := range flags {
		x.status(f)
	}
	x.bulkStr("begin_search")
	x.mapLen(2)
	x.bulkStr("type")
	x.bulkStr("index")
	x.bulkStr("spec")
	x.mapLen(1)
	x.bulkStr("index")
	x.int(int64(index))
	x.bulkStr("find_keys")
	x.mapLen(2)
	x.bulkStr("type")
	x.bulkStr("range")
	x.bulkStr("spec")
	x.mapLen(3)
	x.bulkStr("lastkey")
	x.int(int64(last))
	x.bulkStr("keystep")
	x.int(int64(step))
	x.bulkStr("limit")
	x.int(0)
}

// COMMAND DOCS [command-name ...]
func cmdCommandDocs(x *ctx) {
	var specs []*Spec
	if len(x.args) == 2 {
		for _, n := range x.s.topNames() {
			specs = append(specs, x.s.table[n])
		}
	} else {
		for _, a := range x.args[2:] {
			if sp := x.s.findSpec(a); sp != nil {
				specs = append(specs, sp)
			}
		}
	}
	x.mapLen(len(specs))
	for _, sp := range specs {
		x.bulkStr(sp.Name)
		x.commandDocs(sp)
	}
}

func (x *ctx) commandDocs(sp *Spec) {
	// The text fields in Redis's order, each when set (group always).
	texts := [...]struct{ name, val string }{
		{"summary", sp.Summary}, {"since", sp.Since}, {"group", sp.Group},
		{"complexity", sp.Complex}, {"module", sp.Module},
	}
	n := 0
	for _, present := range []bool{len(sp.Args) > 0, len(sp.Subs) > 0} {
		if present {
			n++
		}
	}
	for _, f := range texts {
		if f.val != "" || f.name == "group" {
			n++
		}
	}
	x.mapLen(n)
	for _, f := range texts {
		if f.val != "" || f.name == "group" {
			x.bulkStr(f.name)
			x.bulkStr(f.val)
		}
	}
	if len(sp.Args) > 0 {
		x.bulkStr("arguments")
		x.argDocs(sp.Args)
	}
	if len(sp.Subs) > 0 {
		x.bulkStr("subcommands")
		x.mapLen(len(sp.Subs))
		for _, sub := range sp.Subs {
			x.bulkStr(sub.Name)
			x.commandDocs(sub)
		}
	}
}

func (x *ctx) argDocs(args []Arg) {
	x.array(len(args))
	for _, a := range args {
		n := 2
		var flags []string
		if a.Optional {
			flags = append(flags, "optional")
		}
		if a.Multiple {
			flags = append(flags, "multiple")
		}
		if a.Type == "key" {
			n++
		}
		if a.Token != "" {
			n++
		}
		if len(flags) > 0 {
			n++
		}
		if len(a.Args) > 0 {
			n++
		}
		x.mapLen(n)
		x.bulkStr("name")
		x.bulkStr(a.Name)
		x.bulkStr("type")
		x.bulkStr(a.Type)
		if a.Type == "key" {
			x.bulkStr("key_spec_index")
			x.int(int64(a.KeySpec))
		}
		if a.Token != "" {
			x.bulkStr("token")
			x.bulkStr(a.Token)
		}
		if len(flags) > 0 {
			x.bulkStr("flags")
			x.setLen(len(flags))
			for _, f := range flags {
				x.status(f)
			}
		}
		if len(a.Args) > 0 {
			x.bulkStr("arguments")
			x.argDocs(a.Args)
		}
	}
}

// COMMAND GETKEYS command [arg ...]
func cmdCommandGetKeys(x *ctx) {
	args := x.args[2:]
	// As Redis's lookupCommand: a name, then a subcommand word; no "a|b".
	sp := x.s.table[string(lowerInto(x.cl.scratch.lower[:0], args[0]))]
	if sp != nil && sp.subs != nil && len(args) >= 2 {
		sp = sp.subs[string(lowerInto(x.cl.scratch.lower[:0], args[1]))]
	}
	switch {
	case sp == nil:
		x.errorReply(msgNoSuchCommand)
		return
	case sp.FirstKey == 0 && sp.Keys == nil, slices.Contains(sp.KeyFlags, "not_key"):
		x.errorReply(msgNoKeyArgs)
		return
	case !sp.arityOK(len(args)):
		x.errorReply(msgGetKeysArity)
		return
	}
	pos := sp.keyPositions(x.cl.keyBuf.pos[:0], args)
	x.cl.keyBuf.pos = pos
	x.cl.keyBuf.used = true
	if len(pos) == 0 {
		x.errorReply(msgInvalidArgs)
		return
	}
	x.array(len(pos))
	for _, p := range pos {
		x.bulk(args[p])
	}
}

// COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]
func cmdCommandList(x *ctx) {
	var filter func(sp *Spec) bool
	switch len(x.args) {
	case 2:
	case 5:
		if !eqFold(x.args[2], "filterby") {
			x.errorReply(msgSyntax)
			return
		}
		val := x.args[4]
		switch {
		case eqFold(x.args[3], "module"):
			filter = func(sp *Spec) bool { return sp.Module != "" && strings.EqualFold(sp.Module, string(val)) }
		case eqFold(x.args[3], "aclcat"):
			filter = func(sp *Spec) bool {
				for _, c := range sp.ACL {
					if strings.EqualFold(c, string(val)) {
						return true
					}
				}
				return false
			}
		case eqFold(x.args[3], "pattern"):
			filter = func(sp *Spec) bool { return glob.Match(val, []byte(sp.Name), true) }
		default:
			x.errorReply(msgSyntax)
			return
		}
	default:
		x.errorReply(msgSyntax)
		return
	}
	var names []string
	for _, sp := range x.s.specs {
		if filter == nil || filter(sp) {
			names = append(names, sp.Name)
		}
	}
	sort.Strings(names)
	x.array(len(names))
	for _, n := range names {
		x.bulkStr(n)
	}
}

// HELP subcommands of containers.
func helpReply(x *ctx, lines ...string) {
	x.array(len(lines))
	for _, l := range lines {
		x.status(l)
	}
}

func cmdCommandHelp(x *ctx) {
	helpReply(x,
		"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"(no subcommand)",
		"    Return details about all commands.",
		"COUNT",
		"    Return the total number of commands in this server.",
		"LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
		"    Return a list of all commands in this server.",
		"INFO [<command-name> ...]",
		"    Return details about the given commands, or all commands if none is given.",
		"GETKEYS <full-command>",
		"    Return the keys from a full command.",
		"DOCS [<command-name> ...]",
		"    Return documentation details about the given commands, or all commands if none is given.",
		"HELP",
		"    Prints this help.")
}

// CONFIG GET parameter [parameter ...]: a read-only view of the effective
// configuration, as a flat list of name/value pairs. As Redis 7.0's
// configGetCommand: a parameter without glob characters ([*?) is looked up
// ignoring case and echoed as the caller typed it (CONFIG GET MAXCLIENTS
// answers "MAXCLIENTS"); a pattern matches ignoring case and answers the
// canonical lower-case names; each setting appears once. Redis lists the
// matches in its hash table's order, which changes with every process;
// cellserver lists them in argument order, a pattern's in table order.
func cmdConfigGet(x *ctx) {
	var out []Setting
	seen := map[string]bool{}
	settings := x.s.liveSettings()
	for _, pat := range x.args[2:] {
		if !bytes.ContainsAny(pat, "[*?") {
			for _, st := range settings {
				if !seen[st.Name] && strings.EqualFold(st.Name, string(pat)) {
					seen[st.Name] = true
					out = append(out, Setting{Name: string(pat), Value: st.Value})
				}
			}
			continue
		}
		for _, st := range settings {
			if !seen[st.Name] && glob.Match(pat, []byte(st.Name), true) {
				seen[st.Name] = true
				out = append(out, st)
			}
		}
	}
	x.mapLen(len(out))
	for _, st := range out {
		x.bulkStr(st.Name)
		x.bulkStr(st.Value)
	}
}

// CONFIG SET parameter value [parameter value ...] changes the settings
// that can change at run time: sync-replicas and sync-replicas-timeout
// (milliseconds, or a duration such as 500ms), acllog-max-len. As Redis 7, the pairs are
// checked first and applied together, or none is; a parameter named twice
// is refused. Every other parameter is immutable while the server runs.
func cmdConfigSet(x *ctx) {
	args := x.args[2:]
	if len(args)%2 != 0 {
		x.errorReply(errWrongArity("config|set"))
		return
	}
	n, timeout := x.s.repl.SyncSettings()
	aclLogMax := -1 // acllog-max-len, when set (acl.go)
	seen := map[string]bool{}
	for i := 0; i < len(args); i += 2 {
		name, val := strings.ToLower(string(args[i])), string(args[i+1])
		if seen[name] {
			x.errorReply(errConfigSet(string(args[i]), "duplicate parameter"))
			return
		}
		seen[name] = true
		switch name {
		case "sync-replicas":
			v, err := strconv.Atoi(val)
			if err != nil || v < 0 || v > MaxSyncReplicas {
				x.errorReply(errConfigSet(name, "argument must be between 0 and "+strconv.Itoa(MaxSyncReplicas)))
				return
			}
			n = v
		case "sync-replicas-timeout":
			d, ok := ParseSyncTimeout(val)
			if !ok {
				x.errorReply(errConfigSet(name, "argument must be a positive number of milliseconds or a duration such as 500ms"))
				return
			}
			timeout = d
		case "acllog-max-len":
			v, ok := parseRedisInt(args[i+1])
			if !ok {
				x.errorReply(errConfigSet(name, "argument couldn't be parsed into an integer"))
				return
			}
			if v < 0 {
				x.errorReply(errConfigSet(name, "argument must be between 0 and 9223372036854775807 inclusive"))
				return
			}
			aclLogMax = int(min(v, aclLogMaxCap))
		default:
			if slices.ContainsFunc(x.s.settings, func(st Setting) bool { return st.Name == name }) {
				x.errorReply(errConfigSet(string(args[i]), "can't set immutable config"))
				return
			}
			x.errorReply(errConfigSetUnknown(string(args[i])))
			return
		}
	}
	if aclLogMax >= 0 {
		x.s.setACLLogMax(aclLogMax)
	}
	oldN, oldT := x.s.repl.SyncSettings()
	x.s.repl.SetSync(n, timeout)
	if n != oldN || timeout != oldT {
		x.s.log.Info("CONFIG SET: acknowledged replication changed", "sync_replicas", n, "sync_replicas_timeout", timeout,
			"was_sync_replicas", oldN, "was_sync_replicas_timeout", oldT)
	}
	x.ok()
}

// MaxSyncReplicas bounds sync-replicas.
const MaxSyncReplicas = 64

// ParseSyncTimeout parses a sync-replicas-timeout: a positive whole number
// of milliseconds, or a positive Go duration ("500ms", "1s"); at most an
// hour.
func ParseSyncTimeout(v string) (time.Duration, bool) {
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 || n > int64(time.Hour/time.Millisecond) {
			return 0, false
		}
		d = time.Duration(n) * time.Millisecond
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, false
	}
	return d, d >= time.Millisecond && d <= time.Hour
}

// liveSettings returns the settings with those that change at run time at
// their current values (CONFIG GET).
func (s *Service) liveSettings() []Setting {
	n, timeout := s.repl.SyncSettings()
	out := slices.Clone(s.settings)
	for i := range out {
		switch out[i].Name {
		case "acllog-max-len":
			s.acl.mu.Lock()
			out[i].Value = strconv.Itoa(s.acl.log.max)
			s.acl.mu.Unlock()
		case "sync-replicas":
			out[i].Value = strconv.Itoa(n)
		case "sync-replicas-timeout":
			out[i].Value = strconv.FormatInt(timeout.Milliseconds(), 10)
		}
	}
	return out
}

func cmdConfigResetStat(x *ctx) {
	for _, sp := range x.s.specs {
		sp.stats.reset()
	}
	x.s.stats.errMu.Lock()
	x.s.stats.errors = make(map[string]int64)
	x.s.stats.errMu.Unlock()
	x.ok()
}

// CONFIG REWRITE persists the settings that changed at run time (the
// replicaof that Sentinel's failover transaction sets with SLAVEOF) to the
// config file, as Redis does. Without a config file it answers Redis's
// error; Sentinel ignores the reply either way (it sends CONFIG REWRITE
// inside MULTI, where it must only be queued).
func cmdConfigRewrite(x *ctx) {
	if x.s.rewrite == nil {
		x.errorReply(msgConfigNoFile)
		return
	}
	if err := x.s.rewrite(); err != nil {
		x.s.log.Warn("CONFIG REWRITE failed", "err", err)
		x.errorReply(errConfigRewrite(err))
		return
	}
	x.s.log.Info("CONFIG REWRITE executed with success")
	x.ok()
}

func cmdConfigHelp(x *ctx) {
	helpReply(x,
		"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GET <pattern>",
		"    Return parameters matching the glob-like <pattern> and their values.",
		"SET <directive> <value> [<directive> <value> ...]",
		"    Set the parameters that change at run time: sync-replicas, sync-replicas-timeout.",
		"RESETSTAT",
		"    Reset statistics reported by the INFO command.",
		"REWRITE",
		"    Rewrite the configuration file.",
		"HELP",
		"    Prints this help.")
}

// INFO [section [section ...]]: the sections named (case-insensitive),
// "default" (no argument: the same), "all" or "everything", in
// infoSections' order.
func cmdInfo(x *ctx) {
	want := map[string]bool{}
	for _, a := range x.args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := want["all"] || want["everything"]
	deflt := len(want) == 0 || want["default"] || all
	c := newInfoCall(x)
	var b strings.Builder
	for _, sec := range infoSections {
		if !want[sec.name] && !(sec.inDefault && deflt) && !(!sec.inDefault && all) {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + sec.title + "\r\n")
		for _, l := range sec.lines(c) {
			b.WriteString(l + "\r\n")
		}
	}
	x.verbatim(b.String())
}

func (s *Service) totalErrors() int64 {
	var n int64
	for _, e := range s.errorStats() {
		n += e.count
	}
	return n
}

func (s *Service) setting(name string) string {
	for _, st := range s.settings {
		if st.Name == name {
			return st.Value
		}
	}
	return ""
}

func executable() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	return p
}

func cmdDBSize(x *ctx) { x.int(int64(x.db().Size(x.locked))) }

func cmdFlushDB(x *ctx) {
	if !flushArgsOK(x) {
		return
	}
	x.db().Flush(x.locked)
	x.ok()
}

func cmdFlushAll(x *ctx) {
	if !flushArgsOK(x) {
		return
	}
	x.s.ks.FlushAll(x.locked)
	x.ok()
}

func flushArgsOK(x *ctx) bool {
	if len(x.args) == 2 && (eqFold(x.args[1], "async") || eqFold(x.args[1], "sync")) {
		return true
	}
	if len(x.args) > 1 {
		x.errorReply(msgSyntax)
		return false
	}
	return true
}

// TIME: [unix seconds, microseconds], as bulk strings, from the server's
// clock (the command's reading, so an injected clock gives fixed replies).
func cmdTime(x *ctx) {
	ns := x.clockNS()
	x.array(2)
	x.bulkStr(strconv.FormatInt(ns/1e9, 10))
	x.bulkStr(strconv.FormatInt(ns%1e9/1e3, 10))
}
