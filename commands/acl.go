package commands

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cellserver/cellserver/glob"
	"github.com/cellserver/cellserver/resp"
)

// ACL users, as Redis 7.0's acl.c. A user has a name, an on/off flag,
// passwords (kept as SHA-256 digests only), and selectors: the root one,
// whose rules ACL SETUSER sets directly, and any number given in
// parentheses. A selector allows commands (a bit per spec in the command
// table, plus a bit for "future commands" that +@all sets), keys (glob
// patterns with read and write permissions) and pub/sub channels (glob
// patterns). A command runs when one selector allows it with all its keys
// and channels.
//
// # Concurrency
//
// A user's rules are an immutable aclState, replaced as a whole by ACL
// SETUSER (copy, change, publish). Every connection points at its user;
// the dispatcher reads the user's restrict pointer, which is nil when the
// root selector allows every command, key and channel (the default user,
// unless changed): that user's commands pay one load and one branch.
// aclTable.mu serializes the changes (SETUSER, DELUSER, LOAD) and guards
// the users map and the log.

// aclCategories are Redis 7.0.15's ACL categories in its order (ACL CAT,
// COMMAND INFO), then cellserver's rate_limit.
var aclCategories = []string{
	"keyspace", "read", "write", "set", "sortedset", "list", "hash", "string",
	"bitmap", "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow",
	"blocking", "dangerous", "connection", "transaction", "scripting", "rate_limit",
}

// aclCatRateLimit is rate_limit's bit.
var aclCatRateLimit = uint32(1) << slices.Index(aclCategories, "rate_limit")

// rateLimitCommands are the commands of @rate_limit, by name (globs):
// every limiter command, whatever its docs' categories. A name not in the
// table is ignored, so a command joins when it is added.
var rateLimitCommands = []string{"cl.*", "gcra", "increx"}

// aclCategory returns the bit of a category name (case-insensitive), or 0.
func aclCategory(name string) uint32 {
	for i, c := range aclCategories {
		if strings.EqualFold(c, name) {
			return 1 << i
		}
	}
	return 0
}

// Key permissions of a pattern and needs of a key spec.
const (
	aclRead  uint8 = 1 << iota // %R~
	aclWrite                   // %W~
	aclRW    = aclRead | aclWrite
)

// Channel arguments a command has (Redis's commands_with_channels, those
// ACL checks: UNSUBSCRIBE and PUNSUBSCRIBE are not checked).
const (
	aclChanNone    uint8 = iota
	aclChanPublish       // argument 1
	aclChanSub           // every argument
	aclChanPattern       // every argument, a pattern compared literally
)

// Limits on what ACL rules may hold, checked before memory is spent.
const (
	aclMaxUsers      = 10000 // users, the default one included
	aclMaxRules      = 1024  // rules in one ACL SETUSER or aclfile line
	aclMaxPatterns   = 1024  // key plus channel patterns of a user, all selectors
	aclMaxPatternLen = 1024  // bytes of one key or channel pattern
	aclMaxSelectors  = 64    // selectors of a user, the root one excluded
	aclMaxNameLen    = 1024  // bytes of a user name
	aclMaxPasswords  = 64    // passwords of a user
)

// DefaultACLLogMaxLen is acllog-max-len's default: entries the ACL LOG keeps.
const DefaultACLLogMaxLen = 128

// aclLogMaxCap bounds acllog-max-len: a larger value keeps this many.
const aclLogMaxCap = 1 << 20

// aclKeyPat is one key pattern of a selector.
type aclKeyPat struct {
	pat  string
	perm uint8 // aclRead, aclWrite or both
	// prefix is set for a pattern that is a literal followed by stars
	// (~team:*): a key matches it when it starts with prefix (and is not
	// empty), compared without the glob matcher.
	prefix   string
	isPrefix bool
}

// newKeyPat makes a key pattern, a literal prefix noted.
func newKeyPat(pat string, perm uint8) aclKeyPat {
	kp := aclKeyPat{pat: pat, perm: perm}
	lit := strings.TrimRight(pat, "*")
	if len(lit) < len(pat) && !strings.ContainsAny(lit, "*?[\\") {
		kp.prefix, kp.isPrefix = lit, true
	}
	return kp
}

// aclSel is one selector. The zero value allows nothing.
type aclSel struct {
	allKeys  bool // allkeys, ~*
	allChans bool // allchannels, &*
	// allCmds: every command, whatever its bit (+@all, cleared by any
	// command removed). future: the bit Redis reserves for commands
	// added later, set only by +@all (ACL GETUSER starts from +@all).
	allCmds, future bool
	cmds            []uint64 // a bit per spec id
	// firstArgs are the first arguments allowed of a command without
	// subcommands whose bit is not set (+select|0), by spec id.
	firstArgs map[int][]string
	keys      []aclKeyPat
	chans     []string
}

func (sel *aclSel) clone() aclSel {
	c := *sel
	c.cmds = slices.Clone(sel.cmds)
	c.keys = slices.Clone(sel.keys)
	c.chans = slices.Clone(sel.chans)
	if sel.firstArgs != nil {
		c.firstArgs = make(map[int][]string, len(sel.firstArgs))
		for k, v := range sel.firstArgs {
			c.firstArgs[k] = slices.Clone(v)
		}
	}
	return c
}

func (sel *aclSel) bit(id int) bool { return sel.cmds[id/64]&(1<<(id%64)) != 0 }

func (sel *aclSel) setBit(id int, on bool) {
	if on {
		sel.cmds[id/64] |= 1 << (id % 64)
	} else {
		sel.cmds[id/64] &^= 1 << (id % 64)
		sel.allCmds = false
	}
}

// allowAll is +@all: every command, those added later included.
func (sel *aclSel) allowAll() {
	for i := range sel.cmds {
		sel.cmds[i] = ^uint64(0)
	}
	sel.allCmds, sel.future = true, true
	sel.firstArgs = nil
}

// changePerm allows or denies sp and its subcommands (ACLChangeSelectorPerm).
func (sel *aclSel) changePerm(sp *Spec, on bool) {
	sel.setBit(sp.id, on)
	delete(sel.firstArgs, sp.id)
	for _, sub := range sp.Subs {
		sel.setBit(sub.id, on)
	}
}

// setCategory allows or denies the commands of a category
// (ACLSetSelectorCommandBitsForCategoryLogic). Redis skips module
// commands there, which have no categories in 7.0; cellserver's are built
// in and their categories declared (CL.POLICY's, @rate_limit), so they
// take part.
func (sel *aclSel) setCategory(specs []*Spec, cat uint32, on bool) {
	var walk func(list []*Spec)
	walk = func(list []*Spec) {
		for _, sp := range list {
			if sp.aclCats&cat != 0 {
				sel.changePerm(sp, on)
			}
			walk(sp.Subs)
		}
	}
	walk(specs)
}

// countCategory counts the commands of a category the selector allows and
// denies (ACLCountCategoryBitsForCommands: modules included).
func (sel *aclSel) countCategory(specs []*Spec, cat uint32) (on, off int) {
	for _, sp := range specs {
		if sp.aclCats&cat != 0 {
			if sel.bit(sp.id) {
				on++
			} else {
				off++
			}
		}
		a, b := sel.countCategory(sp.Subs, cat)
		on, off = on+a, off+b
	}
	return on, off
}

// aclState is a user's rules. It is immutable once published.
type aclState struct {
	on, nopass        bool
	sanitize, skipSan bool     // sanitize-payload, skip-sanitize-payload
	passwords         []string // lower-case hex SHA-256 digests, in order
	sels              []aclSel // [0] is the root selector
}

// open reports whether the root selector allows everything.
func (st *aclState) open() bool {
	r := &st.sels[0]
	return r.allCmds && r.allKeys && r.allChans
}

func (st *aclState) clone() *aclState {
	c := *st
	c.passwords = slices.Clone(st.passwords)
	c.sels = make([]aclSel, len(st.sels))
	for i := range st.sels {
		c.sels[i] = st.sels[i].clone()
	}
	return &c
}

// aclUser is a user. Its name never changes; its rules are replaced whole.
type aclUser struct {
	name  string
	state atomic.Pointer[aclState]
	// restrict is state when the user is confined, nil when its root
	// selector allows everything: what the dispatcher reads.
	restrict atomic.Pointer[aclState]
	deleted  atomic.Bool // removed by ACL DELUSER or ACL LOAD
}

func (u *aclUser) publish(st *aclState) {
	u.state.Store(st)
	if st.open() {
		u.restrict.Store(nil)
	} else {
		u.restrict.Store(st)
	}
}

// aclTable is the server's users and ACL log.
type aclTable struct {
	mu    sync.Mutex // guards users, the log and changes to users' rules
	users map[string]*aclUser
	def   *aclUser // the default user; never removed
	words int      // len of a selector's cmds
	file  string   // --aclfile, "" without
	log   aclLog
}

// newState returns the rules of a new user (ACLCreateUser): off, no
// passwords, no commands, keys or channels (acl-pubsub-default
// resetchannels).
func (t *aclTable) newState() *aclState {
	return &aclState{sels: []aclSel{t.newSel()}}
}

func (t *aclTable) newSel() aclSel { return aclSel{cmds: make([]uint64, t.words)} }

// initACL creates the default user: on, every command, key and channel,
// and password the requirepass one (nopass without).
func (s *Service) initACL(password, file string, logMax int) {
	t := &s.acl
	t.words = (len(s.specs) + 63) / 64
	for _, sp := range s.specs {
		if !strings.Contains(sp.Name, "|") {
			s.aclTop = append(s.aclTop, sp)
		}
	}
	t.users = make(map[string]*aclUser)
	t.file = file
	t.log.max = min(logMax, aclLogMaxCap)
	t.def = &aclUser{name: "default"}
	t.def.publish(s.defaultState(password))
	t.users["default"] = t.def
}

// defaultState is the default user's initial rules (ACLCreateDefaultUser,
// then requirepass).
func (s *Service) defaultState(password string) *aclState {
	st := s.acl.newState()
	for _, op := range []string{"+@all", "~*", "&*", "on", "nopass"} {
		s.applyRule(st, []byte(op))
	}
	if password != "" {
		s.applyRule(st, []byte("resetpass"))
		s.applyRule(st, []byte(">"+password))
	}
	return st
}

// aclRuleErr is why a rule failed (ACLSetUserStringError).
type aclRuleErr string

const (
	aclOK          aclRuleErr = ""
	aclErrUnknown  aclRuleErr = "Unknown command or category name in ACL"
	aclErrSyntax   aclRuleErr = "Syntax error"
	aclErrKeysAll  aclRuleErr = "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
	aclErrChansAll aclRuleErr = "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels"
	aclErrNoPass   aclRuleErr = "The password you are trying to remove from the user does not exist"
	aclErrHash     aclRuleErr = "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
	aclErrChild    aclRuleErr = "Allowing first-arg of a subcommand is not supported"
	aclErrDup      aclRuleErr = "Duplicate user found. A user can only be defined once in config files"
	// cellserver's limits (docs/limits.md).
	aclErrTooMany      aclRuleErr = "Too many key or channel patterns (the limit is 1024 per user)"
	aclErrTooLong      aclRuleErr = "Pattern too long (the limit is 1024 bytes)"
	aclErrTooManyRules aclRuleErr = "Too many rules in a selector (the limit is 1024)"
	aclErrTooManyPw    aclRuleErr = "Too many passwords (the limit is 64 per user)"
	aclErrTooManySl    aclRuleErr = "Too many selectors (the limit is 64 per user)"
)

func hashPassword(pw []byte) string {
	d := sha256.Sum256(pw)
	return hex.EncodeToString(d[:])
}

// validHash is ACLCheckPasswordHash: 64 lower-case hex digits.
func validHash(h []byte) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func hasSpaces(b []byte) bool {
	for _, c := range b {
		if c == ' ' || c == 0 || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
			return true
		}
	}
	return false
}

func (st *aclState) patterns() int {
	n := 0
	for i := range st.sels {
		n += len(st.sels[i].keys) + len(st.sels[i].chans)
		for _, a := range st.sels[i].firstArgs {
			n += len(a)
		}
	}
	return n
}

// applyRule applies one rule to st (ACLSetUser).
func (s *Service) applyRule(st *aclState, op []byte) aclRuleErr {
	if len(op) == 0 {
		return aclOK
	}
	lop := strings.ToLower(string(op))
	switch {
	case lop == "on":
		st.on = true
	case lop == "off":
		st.on = false
	case lop == "skip-sanitize-payload":
		st.skipSan, st.sanitize = true, false
	case lop == "sanitize-payload":
		st.skipSan, st.sanitize = false, true
	case lop == "nopass":
		st.nopass = true
		st.passwords = nil
	case lop == "resetpass":
		st.nopass = false
		st.passwords = nil
	case op[0] == '>' || op[0] == '#':
		var h string
		if op[0] == '>' {
			h = hashPassword(op[1:])
		} else {
			if !validHash(op[1:]) {
				return aclErrHash
			}
			h = string(op[1:])
		}
		if !slices.Contains(st.passwords, h) {
			if len(st.passwords) >= aclMaxPasswords {
				return aclErrTooManyPw
			}
			st.passwords = append(st.passwords, h)
		}
		st.nopass = false
	case op[0] == '<' || op[0] == '!':
		var h string
		if op[0] == '<' {
			h = hashPassword(op[1:])
		} else {
			if !validHash(op[1:]) {
				return aclErrHash
			}
			h = string(op[1:])
		}
		i := slices.Index(st.passwords, h)
		if i < 0 {
			return aclErrNoPass
		}
		st.passwords = slices.Delete(st.passwords, i, i+1)
	case op[0] == '(' && op[len(op)-1] == ')':
		if len(st.sels) > aclMaxSelectors {
			return aclErrTooManySl
		}
		sel := s.acl.newSel()
		rules := splitSelector(op[1 : len(op)-1])
		if len(rules) > aclMaxRules { // as many as one call may give
			return aclErrTooManyRules
		}
		for _, a := range rules {
			if e := s.applySelRule(st, &sel, a); e != aclOK {
				return e
			}
		}
		st.sels = append(st.sels, sel)
	case lop == "clearselectors":
		st.sels = st.sels[:1]
	case lop == "reset":
		s.applyRule(st, []byte("resetpass"))
		s.applyRule(st, []byte("resetkeys"))
		s.applyRule(st, []byte("resetchannels"))
		s.applyRule(st, []byte("off"))
		s.applyRule(st, []byte("sanitize-payload"))
		s.applyRule(st, []byte("clearselectors"))
		s.applyRule(st, []byte("-@all"))
	default:
		return s.applySelRule(st, &st.sels[0], op)
	}
	return aclOK
}

// splitSelector splits the inside of a selector's parentheses into rules
// (sdssplitargs, without quotes: rules hold no spaces).
func splitSelector(b []byte) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(string(b)) {
		out = append(out, []byte(f))
	}
	return out
}

// applySelRule applies a selector rule (ACLSetSelector).
func (s *Service) applySelRule(st *aclState, sel *aclSel, op []byte) aclRuleErr {
	lop := strings.ToLower(string(op))
	switch {
	case lop == "allkeys" || lop == "~*":
		sel.allKeys = true
		sel.keys = nil
	case lop == "resetkeys":
		sel.allKeys = false
		sel.keys = nil
	case lop == "allchannels" || lop == "&*":
		sel.allChans = true
		sel.chans = nil
	case lop == "resetchannels":
		sel.allChans = false
		sel.chans = nil
	case lop == "allcommands" || lop == "+@all":
		sel.allowAll()
	case lop == "nocommands" || lop == "-@all":
		clear(sel.cmds)
		sel.allCmds, sel.future = false, false
		sel.firstArgs = nil
	case op[0] == '~' || op[0] == '%':
		if sel.allKeys {
			return aclErrKeysAll
		}
		var perm uint8
		off := 1
		if op[0] == '%' {
			for ; off < len(op); off++ {
				c := op[off] | 0x20
				if c == 'r' && perm&aclRead == 0 {
					perm |= aclRead
				} else if c == 'w' && perm&aclWrite == 0 {
					perm |= aclWrite
				} else if op[off] == '~' {
					off++
					break
				} else {
					return aclErrSyntax
				}
			}
			if perm == 0 {
				// "%~pattern": Redis 7.0.15 takes it and panics when it
				// describes the user (7.2 refuses it, as here).
				return aclErrSyntax
			}
		} else {
			perm = aclRW
		}
		pat := op[min(off, len(op)):]
		if hasSpaces(pat) {
			return aclErrSyntax
		}
		if len(pat) > aclMaxPatternLen {
			return aclErrTooLong
		}
		if i := slices.IndexFunc(sel.keys, func(k aclKeyPat) bool { return k.pat == string(pat) }); i >= 0 {
			sel.keys[i].perm |= perm
		} else {
			if st.patterns() >= aclMaxPatterns {
				return aclErrTooMany
			}
			sel.keys = append(sel.keys, newKeyPat(string(pat), perm))
		}
		sel.allKeys = false
	case op[0] == '&':
		if sel.allChans {
			return aclErrChansAll
		}
		pat := op[1:]
		if hasSpaces(pat) {
			return aclErrSyntax
		}
		if len(pat) > aclMaxPatternLen {
			return aclErrTooLong
		}
		if !slices.Contains(sel.chans, string(pat)) {
			if st.patterns() >= aclMaxPatterns {
				return aclErrTooMany
			}
			sel.chans = append(sel.chans, string(pat))
		}
		sel.allChans = false
	case op[0] == '+' && (len(op) < 2 || op[1] != '@'):
		name := lop[1:]
		bar := strings.LastIndexByte(name, '|')
		if bar < 0 {
			sp := s.aclLookup(name)
			if sp == nil {
				return aclErrUnknown
			}
			sel.changePerm(sp, true)
			return aclOK
		}
		sp := s.aclLookup(name[:bar])
		if sp == nil {
			return aclErrUnknown
		}
		if strings.IndexByte(name[:bar], '|') >= 0 {
			return aclErrChild
		}
		if bar == len(name)-1 {
			return aclErrSyntax
		}
		if sp.Subs != nil {
			sub := s.aclLookup(name)
			if sub == nil {
				return aclErrUnknown
			}
			sel.changePerm(sub, true)
			return aclOK
		}
		// A first argument of a command without subcommands (deprecated
		// in Redis, kept for compatibility).
		if hasSpaces(op[1+bar+1:]) { // would split the rule in an aclfile
			return aclErrSyntax
		}
		if len(op)-(1+bar+1) > aclMaxPatternLen {
			return aclErrTooLong
		}
		first := string(op[1+bar+1:])
		if sel.firstArgs == nil {
			sel.firstArgs = make(map[int][]string)
		}
		if !slices.ContainsFunc(sel.firstArgs[sp.id], func(a string) bool { return strings.EqualFold(a, first) }) {
			if st.patterns() >= aclMaxPatterns {
				return aclErrTooMany
			}
			sel.firstArgs[sp.id] = append(sel.firstArgs[sp.id], first)
		}
	case op[0] == '-' && (len(op) < 2 || op[1] != '@'):
		sp := s.aclLookup(lop[1:])
		if sp == nil {
			return aclErrUnknown
		}
		sel.changePerm(sp, false)
	case (op[0] == '+' || op[0] == '-') && op[1] == '@':
		cat := aclCategory(string(op[2:]))
		if cat == 0 {
			return aclErrUnknown
		}
		sel.setCategory(s.topSpecs(), cat, op[0] == '+')
	default:
		return aclErrSyntax
	}
	return aclOK
}

// aclLookup finds a command or "container|sub" by lower-case name.
func (s *Service) aclLookup(name string) *Spec {
	if i := strings.IndexByte(name, '|'); i >= 0 {
		sp := s.table[name[:i]]
		if sp == nil || sp.subs == nil {
			return nil
		}
		return sp.subs[name[i+1:]]
	}
	return s.table[name]
}

// topSpecs returns the top-level specs in table order (by name), as
// initACL listed them.
func (s *Service) topSpecs() []*Spec { return s.aclTop }

// aclPrepare fills in each spec's ACL facts from its row and docs: its
// categories, the permissions its keys need, its channel arguments.
func aclPrepare(sp *Spec) {
	sp.aclCats = 0
	for _, c := range sp.ACL {
		sp.aclCats |= aclCategory(c)
	}
	for _, g := range rateLimitCommands {
		if glob.Match([]byte(g), []byte(sp.Name), false) {
			sp.aclCats |= aclCatRateLimit
		}
	}
	sp.aclKeys, sp.aclNotKey = aclKeyNeed(sp.KeyFlags)
	sp.aclKeys2 = sp.aclKeys
	if sp.KeyFlags2 != nil {
		sp.aclKeys2, _ = aclKeyNeed(sp.KeyFlags2)
	}
	sp.aclSetFlags = sp.Name == "set"
	switch sp.Name {
	case "publish", "spublish":
		sp.aclChan = aclChanPublish
	case "subscribe", "ssubscribe":
		sp.aclChan = aclChanSub
	case "psubscribe":
		sp.aclChan = aclChanPattern
	}
}

// aclKeyNeed is the permission a key spec's flags need (Redis's
// ACLSelectorCheckKey: "access" reads; "insert", "delete", "update"
// write), and whether they mark channels rather than keys.
func aclKeyNeed(flags []string) (need uint8, notKey bool) {
	for _, f := range flags {
		switch f {
		case "access":
			need |= aclRead
		case "insert", "delete", "update":
			need |= aclWrite
		case "not_key":
			notKey = true
		}
	}
	return need, notKey
}

// What a permission check denies, in Redis's order of relevance.
const (
	aclAllowed = iota
	aclDeniedCmd
	aclDeniedKey
	aclDeniedAuth
	aclDeniedChannel
)

// checkSel is ACLSelectorCheckCmd: whether sel allows sp with args and
// the resolved keys; pos is the index of the denied key (in keys) or
// channel (in args).
func (sel *aclSel) check(sp *Spec, args [][]byte, keys []rkey) (res, pos int) {
	if !sel.allCmds && sp.Flags&NoAuth == 0 && !sel.bit(sp.id) {
		allowed := false
		if fa := sel.firstArgs[sp.id]; fa != nil && len(args) >= 2 {
			for _, a := range fa {
				if eqFold(args[1], a) {
					allowed = true
					break
				}
			}
		}
		if !allowed {
			return aclDeniedCmd, 0
		}
	}
	if !sel.allKeys && !sp.aclNotKey {
		need := sp.aclKeys
		if sp.aclSetFlags {
			need = setKeyNeed(args)
		}
		for i := range keys {
			if i == 1 && sp.KeyFlags2 != nil { // RENAME's, COPY's destination
				need = sp.aclKeys2
			}
			if !sel.keyOK(keys[i].key, need) {
				return aclDeniedKey, i
			}
		}
	}
	if !sel.allChans && sp.aclChan != aclChanNone {
		last := len(args) - 1
		if sp.aclChan == aclChanPublish {
			last = 1
		}
		for i := 1; i <= last; i++ {
			if !sel.chanOK(args[i], sp.aclChan == aclChanPattern) {
				return aclDeniedChannel, i
			}
		}
	}
	return aclAllowed, 0
}

// keyOK is ACLSelectorCheckKey for a selector without allkeys.
func (sel *aclSel) keyOK(key []byte, need uint8) bool {
	for i := range sel.keys {
		p := &sel.keys[i]
		if p.perm&need != need {
			continue
		}
		if p.isPrefix {
			if len(key) > 0 && len(key) >= len(p.prefix) && string(key[:len(p.prefix)]) == p.prefix {
				return true
			}
			continue
		}
		if glob.Match(unsafeBytes(p.pat), key, false) {
			return true
		}
	}
	return false
}

// chanOK is ACLCheckChannelAgainstList: a pattern (PSUBSCRIBE) must be
// one of the selector's patterns literally.
func (sel *aclSel) chanOK(ch []byte, isPattern bool) bool {
	for _, p := range sel.chans {
		if isPattern && p == string(ch) || !isPattern && glob.Match(unsafeBytes(p), ch, false) {
			return true
		}
	}
	return false
}

// check is ACLCheckAllUserCommandPerm: the first selector that allows the
// command wins; otherwise the most relevant denial (a key or channel
// beats the command, a later argument an earlier one).
func (st *aclState) check(sp *Spec, args [][]byte, keys []rkey) (res, pos int) {
	if len(st.sels) == 1 { // a user without selectors: its root alone
		return st.sels[0].check(sp, args, keys)
	}
	res = aclDeniedCmd
	for i := range st.sels {
		r, p := st.sels[i].check(sp, args, keys)
		if r == aclAllowed {
			return aclAllowed, 0
		}
		if r > res || r == res && p > pos {
			res, pos = r, p
		}
	}
	return res, pos
}

// aclDenied answers a command the client's user may not run (processCommand
// after ACLCheckAllPerm): it is logged, then rejected with NOPERM.
func (s *Service) aclDenied(x *ctx, sp *Spec, st *aclState) bool {
	res, pos := st.check(sp, x.args, x.keys)
	if res == aclAllowed {
		return false
	}
	var object string
	var msg wireErr
	switch res {
	case aclDeniedCmd:
		object, msg = sp.Name, errNoPermCmd(sp.Name)
	case aclDeniedKey:
		object, msg = string(x.keys[pos].key), msgNoPermKey
	default:
		object, msg = string(x.args[pos]), msgNoPermChannel
	}
	s.aclLogAdd(x, res, object, x.cl.user.Load().name)
	s.reject(x, sp, msg)
	return true
}

// aclExecDenied checks a queued command again as EXEC runs it: a denial
// is logged (context multi) and answered in the command's place.
func (s *Service) aclExecDenied(x *ctx, sp *Spec, st *aclState) bool {
	res, pos := st.check(sp, x.args, x.keys)
	if res == aclAllowed {
		return false
	}
	object, reason := sp.Name, "no permission to execute the command or subcommand"
	switch res {
	case aclDeniedKey:
		object, reason = string(x.keys[pos].key), "no permission to touch the specified keys"
	case aclDeniedChannel:
		object, reason = string(x.args[pos]), "no permission to access one of the channels used as arguments"
	}
	s.aclLogAdd(x, res, object, x.cl.user.Load().name)
	x.errorReply(errNoPermExec(reason))
	return true
}

// authRequired is Redis's authRequired for a client that has not
// authenticated: the default user has a password, or is off.
func (s *Service) authRequired() bool {
	st := s.acl.def.state.Load()
	return !st.nopass || !st.on
}

// checkCredentials is ACLCheckUserCredentials: the user exists, is on,
// and is nopass or has pass among its passwords (compared as SHA-256
// digests in constant time).
func (s *Service) checkCredentials(name, pass []byte) *aclUser {
	s.acl.mu.Lock()
	u := s.acl.users[string(name)]
	s.acl.mu.Unlock()
	if u == nil {
		return nil
	}
	st := u.state.Load()
	if !st.on {
		return nil
	}
	if st.nopass {
		return u
	}
	h := hashPassword(pass)
	ok := 0
	for _, p := range st.passwords {
		ok |= subtle.ConstantTimeCompare([]byte(h), []byte(p))
	}
	if ok == 1 {
		return u
	}
	return nil
}

// authenticate is ACLAuthenticateUser: on success the client runs as the
// user; on failure the attempt is logged.
func (s *Service) authenticate(x *ctx, name, pass []byte) bool {
	u := s.checkCredentials(name, pass)
	if u == nil {
		s.aclLogAdd(x, aclDeniedAuth, string(x.args[0]), string(name))
		return false
	}
	x.cl.user.Store(u)
	if u.deleted.Load() {
		// ACL DELUSER or LOAD removed the user meanwhile, and did not see
		// this client among its clients: as if it had come first.
		x.cl.user.Store(s.acl.def)
		return false
	}
	x.cl.setAuthed(true)
	return true
}

// describeCmds is ACLDescribeSelectorCommandRules: +@all or -@all, the
// categories that fit best, then single commands, so that applying the
// rules gives the selector's bits. Single commands come in table order
// (Redis: its command dict's order).
func (s *Service) describeCmds(sel *aclSel) string {
	var b strings.Builder
	additive := !sel.future
	fake := s.acl.newSel()
	if additive {
		b.WriteString("-@all ")
	} else {
		b.WriteString("+@all ")
		fake.allowAll()
	}
	top := s.topSpecs()
	temp := aclSel{cmds: slices.Clone(sel.cmds)}
	applied := make([]bool, len(aclCategories))
	for {
		best, minDiff, maxSame := -1, int(^uint(0)>>1), 0
		for j := range aclCategories {
			if applied[j] {
				continue
			}
			on, off := temp.countCategory(top, 1<<j)
			diff, same := on, off
			if additive {
				diff, same = off, on
			}
			if same > diff && (diff < minDiff || diff == minDiff && same > maxSame) {
				best, minDiff, maxSame = j, diff, same
			}
		}
		if best < 0 {
			break
		}
		sign := "-@"
		if additive {
			sign = "+@"
		}
		fake.setCategory(top, 1<<best, additive)
		temp.setCategory(top, 1<<best, !additive)
		b.WriteString(sign + aclCategories[best] + " ")
		applied[best] = true
	}
	var single func(list []*Spec)
	single = func(list []*Spec) {
		for _, sp := range list {
			ub, fb := sel.bit(sp.id), fake.bit(sp.id)
			if ub != fb {
				if ub {
					b.WriteByte('+')
				} else {
					b.WriteByte('-')
				}
				b.WriteString(sp.Name + " ")
				fake.changePerm(sp, ub)
			}
			single(sp.Subs)
			if !ub {
				for _, a := range sel.firstArgs[sp.id] {
					b.WriteString("+" + sp.Name + "|" + a + " ")
				}
			}
		}
	}
	single(top)
	return strings.TrimSuffix(b.String(), " ")
}

func keyPatString(p aclKeyPat) string {
	switch p.perm {
	case aclRead:
		return "%R~" + p.pat
	case aclWrite:
		return "%W~" + p.pat
	}
	return "~" + p.pat
}

// describeSel is ACLDescribeSelector.
func (s *Service) describeSel(sel *aclSel) string {
	var b strings.Builder
	if sel.allKeys {
		b.WriteString("~* ")
	} else {
		for _, p := range sel.keys {
			b.WriteString(keyPatString(p) + " ")
		}
	}
	if sel.allChans {
		b.WriteString("&* ")
	} else {
		b.WriteString("resetchannels ")
		for _, c := range sel.chans {
			b.WriteString("&" + c + " ")
		}
	}
	b.WriteString(s.describeCmds(sel))
	return b.String()
}

// describeUser is ACLDescribeUser: the rules that recreate the user, as
// ACL LIST and the aclfile show them.
func (s *Service) describeUser(st *aclState) string {
	var b strings.Builder
	if st.on {
		b.WriteString("on ")
	} else {
		b.WriteString("off ")
	}
	if st.nopass {
		b.WriteString("nopass ")
	}
	if st.skipSan {
		b.WriteString("skip-sanitize-payload ")
	}
	if st.sanitize {
		b.WriteString("sanitize-payload ")
	}
	for _, p := range st.passwords {
		b.WriteString("#" + p + " ")
	}
	for i := range st.sels {
		if i == 0 {
			b.WriteString(s.describeSel(&st.sels[i]))
		} else {
			b.WriteString(" (" + s.describeSel(&st.sels[i]) + ")")
		}
	}
	return b.String()
}

// flagNames are the user's flags in Redis's order (ACLUserFlags).
func (st *aclState) flagNames() []string {
	var f []string
	if st.on {
		f = append(f, "on")
	} else {
		f = append(f, "off")
	}
	if st.nopass {
		f = append(f, "nopass")
	}
	if st.skipSan {
		f = append(f, "skip-sanitize-payload")
	}
	if st.sanitize {
		f = append(f, "sanitize-payload")
	}
	return f
}

// userNames returns the users' names sorted as Redis's rax iterates them.
func (t *aclTable) userNames() []string {
	names := make([]string, 0, len(t.users))
	for n := range t.users {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// setUser is ACLStringSetUser: the rules apply to a copy of the user (a
// new user's state when it does not exist), all or none. It returns the
// error text, "" on success. t.mu must be held.
func (s *Service) setUserLocked(x *ctx, name string, rules [][]byte) string {
	merged, bad := mergeSelectorArgs(rules)
	if merged == nil && bad >= 0 {
		return "Unmatched parenthesis in acl selector starting at '" + string(rules[bad]) + "'."
	}
	u := s.acl.users[name]
	var st *aclState
	if u != nil {
		st = u.state.Load().clone()
	} else {
		if len(s.acl.users) >= aclMaxUsers {
			return "Too many users (the limit is 10000)"
		}
		st = s.acl.newState()
	}
	for _, r := range merged {
		if e := s.applyRule(st, r); e != aclOK {
			return "Error in ACL SETUSER modifier '" + string(r) + "': " + string(e)
		}
	}
	if u == nil {
		u = &aclUser{name: name}
		s.acl.users[name] = u
	} else {
		old := u.state.Load()
		s.killPubsubIfNeeded(x, u, old, st)
	}
	u.publish(st)
	return ""
}

// mergeSelectorArgs is ACLMergeSelectorArguments: a selector spread over
// several arguments ("(~a:*" "+get)") becomes one. It returns nil and the
// index of the opening argument when a parenthesis is not closed.
func mergeSelectorArgs(args [][]byte) ([][]byte, int) {
	out := make([][]byte, 0, len(args))
	open := -1
	var sel []byte
	for j, op := range args {
		if len(op) > 0 && op[0] == '(' && op[len(op)-1] != ')' {
			sel = slices.Clone(op)
			open = j
			continue
		}
		if open >= 0 {
			sel = append(append(sel, ' '), op...)
			if len(op) > 0 && op[len(op)-1] == ')' {
				open = -1
				out = append(out, sel)
			}
			continue
		}
		out = append(out, op)
	}
	if open >= 0 {
		return nil, open
	}
	return out, -1
}

// killPubsubIfNeeded is ACLKillPubsubClientsIfNeeded: when a user loses
// channel permissions, its subscribed clients whose channels or patterns
// the new rules no longer allow are disconnected.
func (s *Service) killPubsubIfNeeded(x *ctx, u *aclUser, old, st *aclState) {
	var upcoming []string
	for i := range st.sels {
		if st.sels[i].allChans {
			return
		}
		upcoming = append(upcoming, st.sels[i].chans...)
	}
	match := true
	for i := range old.sels {
		if old.sels[i].allChans {
			match = false
			break
		}
		for _, c := range old.sels[i].chans {
			if !slices.Contains(upcoming, c) {
				match = false
			}
		}
	}
	if match {
		return
	}
	up := aclSel{chans: upcoming}
	s.killWhere(x, func(cl *client) bool {
		if cl.user.Load() != u || !cl.subscribed() {
			return false
		}
		// Lock order: aclTable.mu, then pubsubTable.mu.
		s.pubsub.mu.Lock()
		defer s.pubsub.mu.Unlock()
		for _, p := range cl.pubsub.pats {
			if !up.chanOK([]byte(p), true) {
				return true
			}
		}
		for _, list := range [][]string{cl.pubsub.chans, cl.pubsub.schans} {
			for _, c := range list {
				if !up.chanOK([]byte(c), false) {
					return true
				}
			}
		}
		return false
	})
}

// killWhere disconnects the clients pred picks; the caller's own
// connection closes after its reply. It returns how many.
func (s *Service) killWhere(x *ctx, pred func(cl *client) bool) int {
	n := s.net.Load()
	if n == nil {
		return 0
	}
	// The clients are listed first, then judged: pred may take locks
	// that must not be taken while the connections' registry is.
	var all, victims []*client
	n.Range(func(c *resp.Conn) bool {
		if cl, _ := c.Context().(*client); cl != nil {
			all = append(all, cl)
		}
		return true
	})
	for _, cl := range all {
		if !cl.killed.Load() && !cl.closed.Load() && pred(cl) {
			victims = append(victims, cl)
		}
	}
	for _, cl := range victims {
		if x != nil && cl == x.cl {
			x.c.CloseAfterReply()
			continue
		}
		if !cl.killed.CompareAndSwap(false, true) {
			continue
		}
		cl.conn.Kill()
		s.pubsub.drop(cl)
	}
	return len(victims)
}

// deleteUserLocked removes a user and disconnects its clients
// (ACLFreeUserAndKillClients). t.mu must be held.
func (s *Service) deleteUserLocked(x *ctx, u *aclUser) {
	delete(s.acl.users, u.name)
	u.deleted.Store(true)
	s.killWhere(x, func(cl *client) bool { return cl.user.Load() == u })
	if x != nil && x.cl.user.Load() == u {
		// As Redis: the caller gets its reply, then is closed; meanwhile
		// it runs as the default user, not authenticated.
		x.cl.user.Store(s.acl.def)
		x.cl.setAuthed(false)
	}
}

// unsafeBytes views s as bytes without copying; the bytes must not change.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// loadUsers loads the users at start: the configuration file's "user"
// lines, or the aclfile; both at once is an error, as in Redis
// (ACLLoadUsersAtStartup).
func (s *Service) loadUsers(lines []string) error {
	if s.acl.file != "" && len(lines) > 0 {
		return errors.New("commands: Configuring Redis with users defined in redis.conf and at the same setting an ACL file path is invalid. This setup is very likely to lead to configuration errors and security holes, please define either an ACL file or declare users directly in your redis.conf, but not both.")
	}
	seen := make(map[string]bool)
	for _, line := range lines {
		f := strings.Split(strings.TrimSpace(line), " ")
		name := f[0]
		if name == "" || hasSpaces([]byte(name)) {
			return errors.New("commands: Spaces not allowed in ACL usernames")
		}
		if len(name) > aclMaxNameLen || len(f)-1 > aclMaxRules {
			return errors.New("commands: user " + name[:min(len(name), 64)] + ": name past 1024 bytes or more than 1024 rules")
		}
		if seen[name] {
			return errors.New("commands: user " + name + ": " + string(aclErrDup))
		}
		seen[name] = true
		rules := make([][]byte, 0, len(f)-1)
		for _, r := range f[1:] {
			rules = append(rules, []byte(r))
		}
		merged, bad := mergeSelectorArgs(rules)
		if merged == nil && bad >= 0 {
			return errors.New("commands: user " + name + ": Unmatched parenthesis in acl selector starting at '" + string(rules[bad]) + "'.")
		}
		st := s.acl.newState()
		if name == "default" {
			s.applyRule(st, []byte("reset")) // ACLLoadConfiguredUsers
		}
		if len(s.acl.users) >= aclMaxUsers {
			return errors.New("commands: too many users")
		}
		for _, r := range merged {
			if e := s.applyRule(st, r); e != aclOK {
				return errors.New("commands: Error loading ACL rule '" + string(r) + "' for the user named '" + name + "': " + string(e))
			}
		}
		if name == "default" {
			s.acl.def.publish(st)
			continue
		}
		u := &aclUser{name: name}
		u.publish(st)
		s.acl.users[name] = u
	}
	if s.acl.file != "" {
		if e := s.loadACLFile(nil); e != "" {
			return errors.New("commands: Aborting Redis startup because of ACL errors: " + e)
		}
	}
	return nil
}

// setKeyNeed is the permission SET's key needs (Redis's setGetKeys, its
// key spec having variable flags): write, and read too with GET.
func setKeyNeed(args [][]byte) uint8 {
	for _, a := range args[min(3, len(args)):] {
		if eqFold(a, "get") {
			return aclRW
		}
	}
	return aclWrite
}
