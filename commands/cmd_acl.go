package commands

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The ACL command (Redis 7.0's aclCommand) and the ACL log.

// aclLog is the ACL LOG: the latest denials, newest first, at most max
// (acllog-max-len). Guarded by aclTable.mu.
type aclLog struct {
	entries []*aclLogEntry // newest first
	max     int
}

type aclLogEntry struct {
	count    int64
	reason   int // aclDeniedCmd, aclDeniedKey, aclDeniedChannel, aclDeniedAuth
	multi    bool
	object   string
	username string
	ctimeMS  int64
	cinfo    string
}

// aclLogGroupMS is ACL_LOG_GROUPING_MAX_TIME_DELTA: a denial like one of
// the last 10 entries within this time bumps its count instead of adding
// an entry.
const aclLogGroupMS = 60000

// aclLogAdd is addACLLogEntry.
func (s *Service) aclLogAdd(x *ctx, reason int, object, username string) {
	var b strings.Builder
	writeClientInfo(&b, x.c, time.Now(), x)
	e := &aclLogEntry{count: 1, reason: reason, multi: x.cl.multi.on || x.inExec, object: object,
		username: username, ctimeMS: s.clock().UnixMilli(),
		cinfo: strings.TrimSuffix(b.String(), "\n")}
	t := &s.acl
	t.mu.Lock()
	defer t.mu.Unlock()
	l := &t.log
	for i := 0; i < len(l.entries) && i < 10; i++ {
		c := l.entries[i]
		d := c.ctimeMS - e.ctimeMS
		if c.reason == e.reason && c.multi == e.multi && d <= aclLogGroupMS && d >= -aclLogGroupMS &&
			c.object == e.object && c.username == e.username {
			c.cinfo, c.ctimeMS = e.cinfo, e.ctimeMS
			c.count++
			copy(l.entries[1:i+1], l.entries[:i])
			l.entries[0] = c
			return
		}
	}
	l.entries = append(l.entries, nil)
	copy(l.entries[1:], l.entries)
	l.entries[0] = e
	for len(l.entries) > l.max {
		l.entries[len(l.entries)-1] = nil
		l.entries = l.entries[:len(l.entries)-1]
	}
}

// setACLLogMax sets acllog-max-len (CONFIG SET), dropping the oldest
// entries past it.
func (s *Service) setACLLogMax(n int) {
	t := &s.acl
	t.mu.Lock()
	defer t.mu.Unlock()
	t.log.max = n
	if len(t.log.entries) > n {
		clear(t.log.entries[n:])
		t.log.entries = t.log.entries[:n]
	}
}

// ACL SETUSER username [rule ...]
func cmdACLSetUser(x *ctx) {
	name := x.args[2]
	if hasSpaces(name) {
		x.errorReply(msgACLUserSpaces)
		return
	}
	if len(name) > aclMaxNameLen {
		x.errorReply(msgACLNameTooLong)
		return
	}
	if len(x.args)-3 > aclMaxRules {
		x.errorReply(msgACLTooManyRules)
		return
	}
	t := &x.s.acl
	t.mu.Lock()
	e := x.s.setUserLocked(x, string(name), x.args[3:])
	t.mu.Unlock()
	if e != "" {
		x.errorReply(wireErr("ERR " + sanitizeError(e)))
		return
	}
	x.ok()
}

// ACL DELUSER username [username ...]
func cmdACLDelUser(x *ctx) {
	for _, n := range x.args[2:] {
		if string(n) == "default" {
			x.errorReply(msgACLDelDefault)
			return
		}
	}
	t := &x.s.acl
	t.mu.Lock()
	n := 0
	for _, name := range x.args[2:] {
		if u := t.users[string(name)]; u != nil {
			x.s.deleteUserLocked(x, u)
			n++
		}
	}
	t.mu.Unlock()
	x.int(int64(n))
}

// ACL GETUSER username: a map of flags, passwords, commands, keys,
// channels and selectors (each a map of commands, keys, channels).
func cmdACLGetUser(x *ctx) {
	t := &x.s.acl
	t.mu.Lock()
	u := t.users[string(x.args[2])]
	t.mu.Unlock()
	if u == nil {
		x.null()
		return
	}
	st := u.state.Load()
	x.mapLen(6)
	x.bulkStr("flags")
	flags := st.flagNames()
	x.setLen(len(flags))
	for _, f := range flags {
		x.bulkStr(f)
	}
	x.bulkStr("passwords")
	x.array(len(st.passwords))
	for _, p := range st.passwords {
		x.bulkStr(p)
	}
	x.selectorFields(&st.sels[0])
	x.bulkStr("selectors")
	x.array(len(st.sels) - 1)
	for i := 1; i < len(st.sels); i++ {
		x.mapLen(3)
		x.selectorFields(&st.sels[i])
	}
}

// selectorFields is aclAddReplySelectorDescription.
func (x *ctx) selectorFields(sel *aclSel) {
	x.bulkStr("commands")
	x.bulkStr(x.s.describeCmds(sel))
	x.bulkStr("keys")
	if sel.allKeys {
		x.bulkStr("~*")
	} else {
		pats := make([]string, len(sel.keys))
		for i, p := range sel.keys {
			pats[i] = keyPatString(p)
		}
		x.bulkStr(strings.Join(pats, " "))
	}
	x.bulkStr("channels")
	if sel.allChans {
		x.bulkStr("&*")
	} else {
		pats := make([]string, len(sel.chans))
		for i, c := range sel.chans {
			pats[i] = "&" + c
		}
		x.bulkStr(strings.Join(pats, " "))
	}
}

// ACL LIST: every user as an aclfile line.
func cmdACLList(x *ctx) {
	lines := x.s.aclLines()
	x.array(len(lines))
	for _, l := range lines {
		x.bulkStr(l)
	}
}

// aclLines returns the users as aclfile lines, sorted by name.
func (s *Service) aclLines() []string {
	t := &s.acl
	t.mu.Lock()
	names := t.userNames()
	users := make([]*aclUser, len(names))
	for i, n := range names {
		users[i] = t.users[n]
	}
	t.mu.Unlock()
	lines := make([]string, len(users))
	for i, u := range users {
		lines[i] = "user " + u.name + " " + s.describeUser(u.state.Load())
	}
	return lines
}

// ACL USERS
func cmdACLUsers(x *ctx) {
	t := &x.s.acl
	t.mu.Lock()
	names := t.userNames()
	t.mu.Unlock()
	x.array(len(names))
	for _, n := range names {
		x.bulkStr(n)
	}
}

// ACL WHOAMI
func cmdACLWhoami(x *ctx) { x.bulkStr(x.cl.user.Load().name) }

// ACL CAT [category]
func cmdACLCat(x *ctx) {
	if len(x.args) == 2 {
		x.array(len(aclCategories))
		for _, c := range aclCategories {
			x.bulkStr(c)
		}
		return
	}
	if len(x.args) != 3 {
		x.errorReply(errSubcommandSyntax(cstr(x.args[1]), "acl"))
		return
	}
	cat := aclCategory(string(x.args[2]))
	if cat == 0 {
		x.errorReply(errACLUnknownCategory(x.args[2]))
		return
	}
	var names []string
	var walk func(list []*Spec)
	walk = func(list []*Spec) {
		for _, sp := range list {
			if sp.aclCats&cat != 0 {
				names = append(names, sp.Name)
			}
			walk(sp.Subs)
		}
	}
	walk(x.s.topSpecs())
	x.array(len(names))
	for _, n := range names {
		x.bulkStr(n)
	}
}

// aclGenpassMaxBits is GENPASS_MAX_BITS.
const aclGenpassMaxBits = 4096

// ACL GENPASS [bits]
func cmdACLGenpass(x *ctx) {
	bits := int64(256)
	if len(x.args) == 3 {
		n, ok := parseRedisInt(x.args[2])
		if !ok {
			x.errorReply(msgNotInt)
			return
		}
		bits = n
	} else if len(x.args) > 3 {
		x.errorReply(errSubcommandSyntax(cstr(x.args[1]), "acl"))
		return
	}
	if bits <= 0 || bits > aclGenpassMaxBits {
		x.errorReply(msgACLGenpassBits)
		return
	}
	chars := (bits + 3) / 4
	buf := make([]byte, (chars+1)/2)
	if _, err := rand.Read(buf); err != nil {
		x.errorReply(msgACLGenpassBits)
		return
	}
	x.bulkStr(hex.EncodeToString(buf)[:chars])
}

// ACL LOG [count | RESET]
func cmdACLLog(x *ctx) {
	count := int64(10)
	if len(x.args) > 3 {
		x.errorReply(errSubcommandSyntax(cstr(x.args[1]), "acl"))
		return
	}
	t := &x.s.acl
	if len(x.args) == 3 {
		if eqFold(x.args[2], "reset") {
			t.mu.Lock()
			t.log.entries = nil
			t.mu.Unlock()
			x.ok()
			return
		}
		n, ok := parseRedisInt(x.args[2])
		if !ok {
			x.errorReply(msgNotInt)
			return
		}
		count = max(n, 0)
	}
	now := x.s.clock().UnixMilli()
	t.mu.Lock()
	entries := t.log.entries[:min(int(count), len(t.log.entries))]
	copies := make([]aclLogEntry, len(entries))
	for i, e := range entries {
		copies[i] = *e
	}
	t.mu.Unlock()
	x.array(len(copies))
	for _, e := range copies {
		x.mapLen(7)
		x.bulkStr("count")
		x.int(e.count)
		x.bulkStr("reason")
		x.bulkStr([...]string{aclDeniedCmd: "command", aclDeniedKey: "key", aclDeniedChannel: "channel", aclDeniedAuth: "auth"}[e.reason])
		x.bulkStr("context")
		if e.multi {
			x.bulkStr("multi")
		} else {
			x.bulkStr("toplevel")
		}
		x.bulkStr("object")
		x.bulkStr(e.object)
		x.bulkStr("username")
		x.bulkStr(e.username)
		x.bulkStr("age-seconds")
		x.double(float64(now-e.ctimeMS) / 1000)
		x.bulkStr("client-info")
		x.bulkStr(e.cinfo)
	}
}

// double is Redis's addReplyDouble: a bulk string in RESP2, a double in
// RESP3, both "%.17g".
func (x *ctx) double(d float64) {
	s := strconv.FormatFloat(d, 'g', 17, 64)
	if x.cl.resp3() {
		x.c.Out = append(append(append(x.c.Out, ','), s...), '\r', '\n')
		return
	}
	x.bulkStr(s)
}

// ACL DRYRUN username command [arg ...]
func cmdACLDryrun(x *ctx) {
	s := x.s
	s.acl.mu.Lock()
	u := s.acl.users[string(x.args[2])]
	s.acl.mu.Unlock()
	if u == nil {
		x.errorReply(errACLUserNotFound(x.args[2]))
		return
	}
	args := x.args[3:]
	sp := s.lookup(x.cl, args[0])
	if sp != nil && sp.subs != nil && len(args) >= 2 {
		// Redis's lookupCommand: the container alone is itself (and
		// fails its arity below).
		sp = sp.subs[strings.ToLower(string(args[1]))]
	}
	if sp == nil {
		x.errorReply(errACLCommandNotFound(args[0]))
		return
	}
	if !sp.arityOK(len(args)) {
		x.errorReply(errWrongArity(sp.Name))
		return
	}
	var keys []rkey
	if !sp.aclNotKey {
		for _, p := range sp.keyPositions(nil, args) {
			if p < len(args) {
				keys = append(keys, rkey{key: args[p]})
			}
		}
	}
	res, pos := u.state.Load().check(sp, args, keys)
	switch res {
	case aclAllowed:
		x.ok()
	case aclDeniedCmd:
		x.bulkStr("This user has no permissions to run the '" + sp.Name + "' command")
	case aclDeniedKey:
		x.bulkStr("This user has no permissions to access the '" + string(keys[pos].key) + "' key")
	default:
		x.bulkStr("This user has no permissions to access the '" + string(args[pos]) + "' channel")
	}
}

// ACL LOAD: the aclfile replaces every user, or nothing changes.
func cmdACLLoad(x *ctx) {
	if x.s.acl.file == "" {
		x.errorReply(msgACLNoFile)
		return
	}
	if e := x.s.loadACLFile(x); e != "" {
		x.errorReply(wireErr("ERR " + sanitizeError(e)))
		return
	}
	x.ok()
}

// ACL SAVE: the users to the aclfile, through a temporary file renamed
// over it.
func cmdACLSave(x *ctx) {
	if x.s.acl.file == "" {
		x.errorReply(msgACLNoFile)
		return
	}
	if err := x.s.saveACLFile(); err != nil {
		x.s.log.Warn("ACL SAVE", "err", err)
		x.errorReply(msgACLSaveFailed)
		return
	}
	x.ok()
}

func (s *Service) saveACLFile() error {
	var b strings.Builder
	for _, l := range s.aclLines() {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	f, err := os.CreateTemp(filepath.Dir(s.acl.file), filepath.Base(s.acl.file)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.WriteString(b.String())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, s.acl.file)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// parseACLFile is ACLLoadFromFile's parsing and validation: the users of
// the file's lines, or the errors of every bad line, one string as Redis.
func (s *Service) parseACLFile(data []byte) (map[string]*aclState, string) {
	file := s.acl.file
	var errs strings.Builder
	users := make(map[string]*aclState)
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		line = strings.Trim(line, " \t\r\n")
		if line == "" {
			continue
		}
		args := strings.Split(line, " ")
		if args[0] != "user" || len(args) < 2 {
			fmt.Fprintf(&errs, "%s:%d should start with user keyword followed by the username. ", file, n)
			continue
		}
		if hasSpaces([]byte(args[1])) || args[1] == "" {
			fmt.Fprintf(&errs, "'%s:%d: username '%s' contains invalid characters. ", file, n, args[1])
			continue
		}
		if _, dup := users[args[1]]; dup {
			fmt.Fprintf(&errs, "WARNING: Duplicate user '%s' found on line %d. ", args[1], n)
			continue
		}
		if len(users) >= aclMaxUsers || len(args)-2 > aclMaxRules || len(args[1]) > aclMaxNameLen {
			fmt.Fprintf(&errs, "%s:%d: too many users or rules, or a name too long (limits: 10000 users, 1024 rules, 1024 bytes). ", file, n)
			continue
		}
		st := s.acl.newState()
		users[args[1]] = st
		rules := make([][]byte, 0, len(args)-2)
		for _, a := range args[2:] {
			rules = append(rules, []byte(a))
		}
		merged, bad := mergeSelectorArgs(rules)
		if merged == nil && bad >= 0 {
			fmt.Fprintf(&errs, "%s:%d: Unmatched parenthesis in selector definition.", file, n)
		}
		syntax := false
		for _, r := range merged {
			r = []byte(strings.Trim(string(r), "\t\r\n"))
			if e := s.applyRule(st, r); e != aclOK {
				if e == aclErrUnknown {
					fmt.Fprintf(&errs, "%s:%d: Error in applying operation '%s': %s. ", file, n, r, e)
				} else if !syntax {
					fmt.Fprintf(&errs, "%s:%d: %s. ", file, n, e)
					syntax = true
				}
			}
		}
	}
	return users, errs.String()
}

// loadACLFile is ACL LOAD (and the startup load): every user of the file,
// all or nothing. Clients of users that are replaced are disconnected;
// the default user keeps its clients and takes the file's rules (or the
// initial ones when the file has none). It returns the error text.
func (s *Service) loadACLFile(x *ctx) string {
	data, err := os.ReadFile(s.acl.file)
	if err != nil {
		return "Error loading ACLs, opening file '" + s.acl.file + "': " + errnoText(err)
	}
	users, errs := s.parseACLFile(data)
	if errs != "" {
		return errs + "WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
	}
	t := &s.acl
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, u := range t.users {
		if name != "default" {
			s.deleteUserLocked(x, u)
		}
	}
	def := users["default"]
	if def == nil {
		def = s.defaultState("")
	}
	delete(users, "default")
	t.def.publish(def)
	for name, st := range users {
		u := &aclUser{name: name}
		u.publish(st)
		t.users[name] = u
	}
	return ""
}

// errnoText is strerror's text for the common file errors.
func errnoText(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, os.ErrPermission):
		return "Permission denied"
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func cmdACLHelp(x *ctx) {
	helpReply(x,
		"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"CAT [<category>]",
		"    List all commands that belong to <category>, or all command categories",
		"    when no category is specified.",
		"DELUSER <username> [<username> ...]",
		"    Delete a list of users.",
		"DRYRUN <username> <command> [<arg> ...]",
		"    Returns whether the user can execute the given command without executing the command.",
		"GETUSER <username>",
		"    Get the user's details.",
		"GENPASS [<bits>]",
		"    Generate a secure 256-bit user password. The optional `bits` argument can",
		"    be used to specify a different size.",
		"LIST",
		"    Show users details in config file format.",
		"LOAD",
		"    Reload users from the ACL file.",
		"LOG [<count> | RESET]",
		"    Show the ACL log entries.",
		"SAVE",
		"    Save the current config to the ACL file.",
		"SETUSER <username> <attribute> [<attribute> ...]",
		"    Create or modify a user with the specified attributes.",
		"USERS",
		"    List all the registered usernames.",
		"WHOAMI",
		"    Return the current connection username.",
		"HELP",
		"    Prints this help.",
	)
}
