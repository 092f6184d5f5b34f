package commands_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// TestCommandTableWalk walks the command table as a client sees it
// (COMMAND LIST, COMMAND INFO, COMMAND DOCS, COMMAND GETKEYS) and checks
// every row: it runs (it has a handler), it has a golden case, and its key
// positions agree with its documented arguments.
func TestCommandTableWalk(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{Clock: servertest.NewClock(goldenT0).Now})
	c := resptest.MustDial(t, addr)

	list := c.MustDo(t, "COMMAND", "LIST")
	if list.Kind != '*' || len(list.Elems) == 0 {
		t.Fatalf("COMMAND LIST: %v", list)
	}
	var names []string
	subs := map[string]bool{}
	for _, e := range list.Elems {
		names = append(names, e.Str)
		if strings.Contains(e.Str, "|") {
			subs[e.Str] = true
		}
	}
	if n := c.MustDo(t, "COMMAND", "COUNT"); n.Str != strconv.Itoa(len(names)-len(subs)) {
		t.Errorf("COMMAND COUNT = %s, COMMAND LIST has %d top-level commands", n.Str, len(names)-len(subs))
	}
	covered := goldenCommandNames(t, subs)

	checked := 0
	for _, name := range names {
		info := c.MustDo(t, "COMMAND", "INFO", name)
		if info.Kind != '*' || len(info.Elems) != 1 || info.Elems[0].Kind != '*' || len(info.Elems[0].Elems) != 10 {
			t.Errorf("COMMAND INFO %s: %v", name, info)
			continue
		}
		row := parseInfoRow(t, info.Elems[0])
		if row.name != name {
			t.Errorf("COMMAND INFO %s names %q", name, row.name)
		}
		if !covered[name] {
			t.Errorf("%s: no case in commands/testdata/*.txt", name)
		}
		isContainer := len(row.subcommands) > 0
		if !isContainer || name == "command" { // COMMAND runs without a subcommand
			checkRuns(t, addr, name, row.arity)
		}
		checkKeys(t, c, name, row)
		checked++
	}
	if checked < 40 {
		t.Fatalf("checked only %d commands", checked)
	}
	t.Logf("checked %d commands and subcommands", checked)
}

// infoRow is one COMMAND INFO entry.
type infoRow struct {
	name                    string
	arity                   int
	flags                   map[string]bool
	firstKey, lastKey, step int
	keySpecs                int
	subcommands             []string
}

func parseInfoRow(t *testing.T, v resptest.Value) infoRow {
	t.Helper()
	e := v.Elems
	atoi := func(x resptest.Value) int {
		if x.Kind != ':' {
			t.Fatalf("COMMAND INFO %s: %v is not an integer", e[0].Str, x)
		}
		n, _ := strconv.Atoi(x.Str)
		return n
	}
	row := infoRow{
		name: e[0].Str, arity: atoi(e[1]), flags: map[string]bool{},
		firstKey: atoi(e[3]), lastKey: atoi(e[4]), step: atoi(e[5]),
		keySpecs: len(e[8].Elems),
	}
	for _, f := range e[2].Elems {
		row.flags[f.Str] = true
	}
	for _, s := range e[9].Elems {
		row.subcommands = append(row.subcommands, s.Elems[0].Str)
	}
	return row
}

// minArgs returns placeholder arguments (after the name) that satisfy
// arity: exactly arity-1 of them, or the minimum for a negative arity.
func minArgs(arity int) []string {
	n := arity - 1
	if arity < 0 {
		n = -arity - 1
	}
	args := make([]string, n)
	for i := range args {
		args[i] = "1"
	}
	return args
}

// checkRuns calls name on its own connection with placeholder arguments:
// a row without a handler would be unknown, fail its arity check, or kill
// the connection.
func checkRuns(t *testing.T, addr, name string, arity int) {
	t.Helper()
	c := resptest.MustDial(t, addr)
	args := append([]string{name}, minArgs(arity)...)
	if container, sub, ok := strings.Cut(name, "|"); ok {
		args = append([]string{container, sub}, minArgs(arity)[1:]...) // the arity counts sub
	}
	if name == "shutdown" {
		args = append(args, "abort") // a plain SHUTDOWN would stop the server
	}
	v, err := c.Do(args...)
	if err != nil {
		t.Errorf("%q: %v (no handler?)", args, err)
		return
	}
	if v.Kind == '-' && (strings.HasPrefix(v.Str, "ERR unknown ") ||
		strings.HasPrefix(v.Str, "ERR wrong number of arguments")) {
		t.Errorf("%q: %s", args, v.Str)
	}
	if strings.EqualFold(name, "quit") {
		return
	}
	// QUEUED after MULTI; ["pong" ""] in subscribed mode (SUBSCRIBE).
	if p, err := c.Do("PING"); err != nil || p.Str != "PONG" && p.Str != "QUEUED" &&
		!(p.Kind == '*' && len(p.Elems) == 2 && p.Elems[0].Str == "pong") {
		t.Errorf("PING after %q: %v %v", args, p, err)
	}
}

// docArg is one argument of COMMAND DOCS.
type docArg struct {
	name, typ, token string
	optional         bool
	multiple         bool
	args             []docArg
}

func parseDocArgs(v resptest.Value) []docArg {
	var out []docArg
	for _, a := range v.Elems {
		var d docArg
		for i := 0; i+1 < len(a.Elems); i += 2 {
			val := a.Elems[i+1]
			switch a.Elems[i].Str {
			case "name":
				d.name = val.Str
			case "type":
				d.typ = val.Str
			case "token":
				d.token = val.Str
			case "flags":
				for _, f := range val.Elems {
					d.optional = d.optional || f.Str == "optional"
					d.multiple = d.multiple || f.Str == "multiple"
				}
			case "arguments":
				d.args = parseDocArgs(val)
			}
		}
		out = append(out, d)
	}
	return out
}

// firstKeyPosition returns the argument position (1 = right after the
// name) of the first documented key, or 0 without one; ok is false when
// optional or alternative arguments come before it, so that the position
// is not fixed.
func firstKeyPosition(args []docArg) (pos int, ok bool) {
	n := 0
	var walk func(args []docArg) (int, bool)
	walk = func(args []docArg) (int, bool) {
		for _, a := range args {
			if a.token != "" {
				n++
			}
			switch {
			case a.typ == "key":
				return n + 1, true
			case a.typ == "block":
				if p, ok := walk(a.args); p > 0 || !ok {
					return p, ok
				}
			case a.typ == "oneof" || a.optional:
				if p, _ := walk(a.args); p > 0 {
					return p, false
				}
				return 0, false
			default:
				n++
			}
		}
		return 0, true
	}
	return walk(args)
}

// hasKeyArg reports whether any documented argument, nested ones included,
// is a key.
func hasKeyArg(args []docArg) bool {
	for _, a := range args {
		if a.typ == "key" || hasKeyArg(a.args) {
			return true
		}
	}
	return false
}

// keyArgs counts the top-level key arguments: each has its own key spec
// (RENAME's key and newkey), a multiple one too (DEL's keys).
func keyArgs(args []docArg) int {
	n := 0
	for _, a := range args {
		if a.typ == "key" {
			n++
		}
	}
	return max(n, 1) // a key inside a block (CL.ALL) counts once
}

// notKeyChannels are the shard channel commands: Redis documents their
// channels as strings, with a key spec flagged not_key (routed by hash
// slot as keys are, but no key).
var notKeyChannels = map[string]bool{"spublish": true, "ssubscribe": true, "sunsubscribe": true}

// checkKeys checks that a command documented with a key argument has key
// positions (FirstKey > 0, a key spec) with its first key where the docs
// put it, that COMMAND GETKEYS finds that key, and that commands without
// keys report none.
func checkKeys(t *testing.T, c *resptest.Conn, name string, row infoRow) {
	t.Helper()
	docs := c.MustDo(t, "COMMAND", "DOCS", name)
	if len(docs.Elems) != 2 {
		t.Errorf("COMMAND DOCS %s: %v", name, docs)
		return
	}
	var args []docArg
	fields := docs.Elems[1].Elems
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i].Str == "arguments" {
			args = parseDocArgs(fields[i+1])
		}
	}
	if notKeyChannels[name] {
		// Routed by slot, not keys: GETKEYS finds none, as Redis's.
		if g := c.MustDo(t, "COMMAND", "GETKEYS", name, "ch", "msg"); g.Kind != '-' {
			t.Errorf("COMMAND GETKEYS %s: %v, want an error", name, g)
		}
		return
	}
	if !hasKeyArg(args) {
		if row.firstKey != 0 || row.lastKey != 0 || row.step != 0 || row.keySpecs != 0 {
			t.Errorf("%s: no key argument documented, but key positions %d %d %d and %d key specs",
				name, row.firstKey, row.lastKey, row.step, row.keySpecs)
		}
		if !strings.Contains(name, "|") && len(row.subcommands) == 0 {
			getkeys := append([]string{"COMMAND", "GETKEYS", name}, minArgs(row.arity)...)
			if len(getkeys) == 3 {
				getkeys = append(getkeys, "x")
			}
			if v := c.MustDo(t, getkeys...); v.Str != "ERR The command has no key arguments" {
				t.Errorf("%q: %v", getkeys, v)
			}
		}
		return
	}
	if row.flags["movablekeys"] && row.firstKey == 0 && row.lastKey == 0 && row.step == 0 &&
		row.keySpecs == keyArgs(args) {
		return // keys found by keyword (XREAD's STREAMS), as Redis reports them; checked in streams.txt
	}
	if row.firstKey <= 0 || row.step <= 0 || row.keySpecs != keyArgs(args) {
		t.Errorf("%s takes a key but COMMAND INFO has first key %d, step %d, %d key specs",
			name, row.firstKey, row.step, row.keySpecs)
		return
	}
	pos, fixed := firstKeyPosition(args)
	if !fixed {
		t.Errorf("%s: optional arguments before the first key", name)
		return
	}
	// A subcommand's arguments are documented after its own name, which
	// is argument 1 of the call.
	words := strings.Split(name, "|")
	pos += len(words) - 1
	if pos != row.firstKey {
		t.Errorf("%s: first key documented as argument %d, COMMAND INFO says %d", name, pos, row.firstKey)
	}
	if row.flags["movablekeys"] {
		return // no generic example; CL.ALL's keys are checked in limiters.txt
	}
	if pos != len(words) {
		t.Errorf("%s: the key is argument %d, not the first", name, pos)
	}
	// An example call: the key, then "1" for every required argument
	// documented after it, padded to the arity.
	call := []string{"the-key"}
	for _, a := range args[1:] {
		if !a.optional {
			if a.token != "" {
				call = append(call, a.token)
			}
			call = append(call, "1")
		}
	}
	for len(words)-1+len(call) < len(minArgs(row.arity)) {
		call = append(call, "1")
	}
	example := append(append([]string{"COMMAND", "GETKEYS"}, words...), call...)
	v := c.MustDo(t, example...)
	if v.Kind != '*' || len(v.Elems) == 0 || v.Elems[0].Str != "the-key" {
		t.Errorf("%q: %v, want the key first", example, v)
	}
}

// The table walk above must be able to fail: a row with keys documented
// but no key positions, one without a golden case, and one without a
// handler are all caught by its helpers.
func TestCommandTableWalkHelpers(t *testing.T) {
	key := []docArg{{name: "key", typ: "key"}, {name: "n", typ: "integer"}}
	if p, ok := firstKeyPosition(key); p != 1 || !ok {
		t.Errorf("firstKeyPosition(key first) = %d, %v", p, ok)
	}
	block := []docArg{{typ: "block", multiple: true, args: []docArg{{typ: "string"}, {typ: "key"}}}}
	if p, ok := firstKeyPosition(block); p != 2 || !ok {
		t.Errorf("firstKeyPosition(block) = %d, %v", p, ok)
	}
	opt := []docArg{{typ: "string", optional: true}, {typ: "key"}}
	if _, ok := firstKeyPosition(opt); ok {
		t.Error("firstKeyPosition accepted an optional argument before the key")
	}
	if hasKeyArg([]docArg{{typ: "string"}}) || !hasKeyArg(block) {
		t.Error("hasKeyArg")
	}
	if got := minArgs(-3); len(got) != 2 {
		t.Errorf("minArgs(-3) = %q", got)
	}
	if got := minArgs(2); len(got) != 1 {
		t.Errorf("minArgs(2) = %q", got)
	}
	names := goldenCommandNames(t, map[string]bool{"client|list": true})
	for _, n := range []string{"ping", "client", "client|list", "cl.throttle"} {
		if !names[n] {
			t.Errorf("golden files do not mention %s", n)
		}
	}
	if names["nosuch-command-name"] {
		t.Error("goldenCommandNames invents names")
	}
}
