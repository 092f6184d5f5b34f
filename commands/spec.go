package commands

import "github.com/cellserver/cellserver/keyspace"

// Flags are the facts about a command that the dispatcher, MULTI, the
// replica's read-only mode and COMMAND act on. They live in the table row, never in a second
// list of names.
type Flags uint32

// Command flags. The ones with a Redis name are reported by COMMAND INFO.
const (
	Write       Flags = 1 << iota // changes the keyspace ("write")
	ReadOnly                      // reads the keyspace only ("readonly")
	Fast                          // O(1) or O(log N) ("fast")
	Admin                         // server administration ("admin")
	NoScript                      // "noscript"
	Loading                       // allowed while loading ("loading")
	Stale                         // "stale"
	NoAuth                        // allowed before AUTH ("no_auth")
	Module                        // a redis-cell style module command ("module")
	MovableKeys                   // keys are not at fixed positions ("movablekeys")
	AllowBusy                     // "allow_busy"
	NoMulti                       // "no_multi": refused inside MULTI
	SkipSlowlog                   // "skip_slowlog" (EXEC: its commands are logged instead)
	// RunsInMulti marks transaction control commands (MULTI, EXEC, DISCARD,
	// QUIT, RESET, WATCH) that run at once instead of being queued. Not
	// reported.
	RunsInMulti
	PubSub // a pub/sub command ("pubsub")
	// WholeKeyspace marks commands that read or change more than their
	// key arguments (every shard of a database: KEYS, SCAN, DBSIZE,
	// FLUSHDB, FLUSHALL, INFO) or change which database the next commands
	// use (SELECT): a transaction holding one runs with every shard lock
	// held. Not reported.
	WholeKeyspace
	// DenyOOM: refused with the OOM error while the memory is over
	// maxmemory under noeviction, whatever it would add ("denyoom"; the
	// handler checks, with Keyspace.CanInsert).
	DenyOOM
	NoAsyncLoading // "no_async_loading" (SAVE, BGSAVE)
	Blocking       // "blocking": may block the client (XREAD BLOCK)
)

// flagNames lists the reported flags in the order Redis 7 replies them.
var flagNames = []struct {
	f    Flags
	name string
}{
	{Write, "write"}, {ReadOnly, "readonly"}, {DenyOOM, "denyoom"}, {Module, "module"},
	{Admin, "admin"}, {PubSub, "pubsub"}, {NoScript, "noscript"}, {Blocking, "blocking"}, {Loading, "loading"},
	{Stale, "stale"}, {SkipSlowlog, "skip_slowlog"}, {Fast, "fast"}, {NoAuth, "no_auth"},
	{NoAsyncLoading, "no_async_loading"}, {NoMulti, "no_multi"}, {MovableKeys, "movablekeys"}, {AllowBusy, "allow_busy"},
}

// Arg documents one argument for COMMAND DOCS, with Redis 7's fields.
type Arg struct {
	Name     string
	Type     string // key, string, integer, double, pattern, unix-time, pure-token, oneof, block
	Token    string // a literal word that introduces the argument, e.g. "EX"
	KeySpec  int    // index into the command's key specs, for Type "key"
	Optional bool
	Multiple bool
	Args     []Arg // members of a oneof or block
}

// Doc is what COMMAND DOCS and COMMAND INFO report about a command beyond
// its dispatch row: one entry of the docs table, keyed by the command's name.
type Doc struct {
	ACL     []string // ACL categories without "@"
	Tips    []string // COMMAND INFO's command tips (e.g. "nondeterministic_output")
	Group   string   // COMMAND DOCS group: generic, string, connection, server, transactions, module
	Module  string   // COMMAND DOCS module name for module commands
	Summary string
	Since   string
	Complex string
	Args    []Arg
}

// KeywordSpec is a key spec found by keyword (Redis's begin_search
// keyword, then find_keys range): the keys follow Keyword, searched from
// argument StartFrom on; LastKey, Step and Limit are the range's.
type KeywordSpec struct {
	Keyword              string
	StartFrom            int
	LastKey, Step, Limit int
}

// Spec is one row of the command table.
type Spec struct {
	Name  string // lower-case; "container|sub" for subcommands
	Arity int    // Redis convention: N exactly, -N at least N (the name counts)
	Flags Flags
	// FirstKey, LastKey, Step are Redis's legacy key positions (LastKey -1:
	// the last argument). All zero for commands without keys.
	FirstKey, LastKey, Step int
	// KeyFlags describe the key spec for COMMAND INFO (e.g. "RW", "access",
	// "update"); empty for commands without keys.
	KeyFlags []string
	// KeyFlags2, when set, are the flags of a second key spec, for the
	// key at FirstKey+1 (LastKey): the two keys of RENAME and COPY play
	// different parts (source, destination), as Redis's two key specs say.
	KeyFlags2 []string
	// KeyNotes is the key spec's "notes" in COMMAND INFO (XADD's).
	KeyNotes string
	// KeyKeyword, when set, makes the key spec COMMAND INFO reports
	// begin with a keyword search (XREAD's STREAMS) rather than an
	// index; the keys themselves come from Keys.
	KeyKeyword *KeywordSpec
	Subs       []*Spec // subcommands of a container command (CLIENT, COMMAND, CONFIG)
	// Doc is filled in from the docs table (docs.go) when the table is
	// built; the dispatcher never reads it.
	Doc

	// Keys appends to dst the key positions of a call whose keys are not
	// at fixed positions (MovableKeys) and returns it; nil means use
	// FirstKey/LastKey/Step. It must not allocate beyond growing dst.
	Keys func(dst []int, args [][]byte) []int
	// Run executes the command; nil for containers, whose subcommands run.
	Run func(x *ctx)
	// derive, when set, resolves the command's keys instead of the
	// positions above: CL.APPLY's keys come from its policy too.
	derive func(x *ctx, db *keyspace.DB)
	// crossDB, when set, reports whether a call with args reaches a key
	// of another database than x's client's (COPY ... DB n): a
	// transaction that queued one runs with every shard lock held.
	crossDB func(x *ctx, args [][]byte) bool

	id int // index in the flat list of specs, for statistics and ACL bits
	// ACL facts (aclPrepare): the categories' bits, the permissions the
	// keys need (aclRead, aclWrite), the channel arguments, and whether
	// the key spec is not_key (shard channels, checked as channels).
	aclCats   uint32
	aclKeys   uint8
	aclKeys2  uint8 // the second key's, from KeyFlags2 (RENAME, COPY)
	aclChan   uint8
	aclNotKey bool
	// aclSetFlags: the key's permissions depend on the arguments (SET's
	// GET option; setKeyNeed).
	aclSetFlags bool
	subs        map[string]*Spec
	stats       cmdStats
}

// keyPositions appends the indexes of the key arguments in args to dst
// and returns it.
func (sp *Spec) keyPositions(dst []int, args [][]byte) []int {
	if sp.Keys != nil {
		return sp.Keys(dst, args)
	}
	first, last := sp.keyRange(len(args))
	for i := first; i <= last; i += sp.Step {
		dst = append(dst, i)
	}
	return dst
}

// keyRange returns the first and last key positions of a call with n
// arguments of a command with fixed key positions (first > last: none).
func (sp *Spec) keyRange(n int) (first, last int) {
	if sp.FirstKey == 0 {
		return 1, 0
	}
	last = sp.LastKey
	if last < 0 {
		last = n + last
	}
	return sp.FirstKey, min(last, n-1)
}

// arityOK reports whether n arguments (the name included) fit the arity.
func (sp *Spec) arityOK(n int) bool {
	if sp.Arity >= 0 {
		return n == sp.Arity
	}
	return n >= -sp.Arity
}
