package commands

import (
	"maps"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestCommandTableRows checks the table literal itself: sorted rows, a
// handler on every row that is not a container, key facts that agree with
// one another, and subcommands named "container|sub".
func TestCommandTableRows(t *testing.T) {
	rows := commandSpecs()
	if !sort.SliceIsSorted(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name }) {
		t.Error("commandTable rows are not sorted by name")
	}
	n := 0
	var check func(sp *Spec, parent string)
	check = func(sp *Spec, parent string) {
		n++
		if sp.Name != strings.ToLower(sp.Name) {
			t.Errorf("%s: name not lower-case", sp.Name)
		}
		if parent != "" && !strings.HasPrefix(sp.Name, parent+"|") {
			t.Errorf("%s: subcommand of %s not named %s|...", sp.Name, parent, parent)
		}
		if sp.Run == nil && len(sp.Subs) == 0 {
			t.Errorf("%s: no handler", sp.Name)
		}
		if sp.Arity == 0 {
			t.Errorf("%s: arity 0", sp.Name)
		}
		hasKeys := sp.FirstKey > 0
		if sp.KeyKeyword != nil {
			// Keys found by keyword (XREAD): no legacy positions, a key
			// function and the spec's flags.
			if hasKeys || sp.Step != 0 || sp.LastKey != 0 || sp.Keys == nil || len(sp.KeyFlags) == 0 {
				t.Errorf("%s: a keyword key spec with positions %d %d %d, flags %v", sp.Name,
					sp.FirstKey, sp.LastKey, sp.Step, sp.KeyFlags)
			}
		} else if hasKeys != (sp.Step > 0) || hasKeys != (len(sp.KeyFlags) > 0) || hasKeys != (sp.LastKey != 0) {
			t.Errorf("%s: first key %d, last key %d, step %d, key flags %v disagree",
				sp.Name, sp.FirstKey, sp.LastKey, sp.Step, sp.KeyFlags)
		}
		if sp.Keys != nil && sp.Flags&MovableKeys == 0 {
			t.Errorf("%s: a key function without the movablekeys flag", sp.Name)
		}
		if sp.Flags&Write != 0 && sp.Flags&ReadOnly != 0 {
			t.Errorf("%s: both write and readonly", sp.Name)
		}
		if sp.Group == "" || sp.Summary == "" {
			t.Errorf("%s: no COMMAND DOCS group or summary", sp.Name)
		}
		for _, sub := range sp.Subs {
			check(sub, sp.Name)
		}
	}
	for _, sp := range rows {
		check(sp, "")
	}
	if n < 40 {
		t.Fatalf("only %d rows", n)
	}
}

// subGroups files the commands Redis documents in a broad group (server,
// connection, generic) with the family they belong to, as Redis's sources
// do (replication.c, slowlog.c, latency.c, module.c, tracking.c, acl.c): the file
// is cmd_<sub-group>.go. A subcommand is looked up by its full name, then
// by its container's.
var subGroups = map[string]string{
	"acl":     "acl",
	"latency": "latency",
	"memory":  "memory",
	"module":  "module",
	"slowlog": "slowlog",

	"psync":     "replication",
	"replconf":  "replication",
	"replicaof": "replication",
	"role":      "replication",
	"slaveof":   "replication",
	"sync":      "replication",
	"wait":      "replication",
	"waitaof":   "replication",

	"monitor":  "monitor",
	"save":     "save",
	"bgsave":   "save",
	"lastsave": "save",
	"shutdown": "save",

	"client|caching":      "tracking",
	"client|getredir":     "tracking",
	"client|tracking":     "tracking",
	"client|trackinginfo": "tracking",
}

// wantFile returns the file sp's handler belongs in: a cl_*.go file
// (pattern) for a limiter command (cl.* and GCRA), else cmd_<group>.go
// with the group its COMMAND DOCS row names, or its sub-group.
func wantFile(sp *Spec) (pattern string) {
	if strings.HasPrefix(sp.Name, "cl.") || sp.Name == "gcra" {
		return "cl_*.go"
	}
	group := sp.Group
	container, _, _ := strings.Cut(sp.Name, "|")
	if g, ok := subGroups[sp.Name]; ok {
		group = g
	} else if g, ok := subGroups[container]; ok {
		group = g
	}
	return "cmd_" + group + ".go"
}

// TestCommandFileLayout keeps the files filed by family: every row's
// handler is defined in the file wantFile names (cl_*.go for the product,
// cmd_<redis group>.go for what cellserver owes Redis).
func TestCommandFileLayout(t *testing.T) {
	n := 0
	var check func(sp *Spec)
	check = func(sp *Spec) {
		for _, sub := range sp.Subs {
			check(sub)
		}
		if sp.Run == nil {
			return // a container: its subcommands run
		}
		n++
		pc := reflect.ValueOf(sp.Run).Pointer()
		file, _ := runtime.FuncForPC(pc).FileLine(pc)
		pattern := wantFile(sp)
		if ok, _ := filepath.Match(pattern, filepath.Base(file)); !ok {
			t.Errorf("%s (group %s): handler %s in %s, want %s", sp.Name, sp.Group,
				runtime.FuncForPC(pc).Name(), filepath.Base(file), pattern)
		}
	}
	for _, sp := range commandSpecs() {
		check(sp)
	}
	if n < 100 {
		t.Fatalf("only %d handlers checked", n)
	}
}

// TestCommandDocsJoin checks that the dispatch rows and the docs table
// name the same commands: every row (subcommands included) has docs, and
// every docs entry has a row. A mismatch would make commandSpecs panic at
// startup; here it is named.
func TestCommandDocsJoin(t *testing.T) {
	rows := commandTable()
	if bad := docsMismatch(rows, commandDocs); len(bad) > 0 {
		t.Errorf("dispatch rows and docs table disagree:\n%s", strings.Join(bad, "\n"))
	}
	// The check can fail: a docs table missing one row's entry and holding
	// an orphan entry is reported on both counts.
	docs := maps.Clone(commandDocs)
	delete(docs, "client|id")
	docs["nosuch"] = Doc{}
	want := []string{"docs for nosuch but no row", "no docs for client|id"}
	if got := docsMismatch(rows, docs); !slices.Equal(got, want) {
		t.Errorf("docsMismatch with a missing and an orphan entry = %q, want %q", got, want)
	}
	for _, sp := range commandSpecs() {
		if sp.Doc.Group == "" {
			t.Errorf("%s: docs not joined", sp.Name)
		}
	}
}

// TestKeyPositions checks Spec.keyPositions, which COMMAND GETKEYS and
// the key checks of the table walk rely on.
func TestKeyPositions(t *testing.T) {
	args := func(s string) [][]byte {
		var out [][]byte
		for _, f := range strings.Fields(s) {
			out = append(out, []byte(f))
		}
		return out
	}
	for i, tc := range []struct {
		sp   *Spec
		call string
		want []int
	}{
		0: {&Spec{FirstKey: 1, LastKey: 1, Step: 1}, "get k", []int{1}},
		1: {&Spec{FirstKey: 1, LastKey: -1, Step: 1}, "del a b c", []int{1, 2, 3}},
		2: {&Spec{FirstKey: 1, LastKey: -1, Step: 2}, "mset a 1 b 2", []int{1, 3}},
		3: {&Spec{}, "ping", nil},
		4: {&Spec{FirstKey: 1, LastKey: 1, Step: 1}, "cl.throttle", nil},
	} {
		got := tc.sp.keyPositions(nil, args(tc.call))
		if len(got) != len(tc.want) {
			t.Errorf("%d: keyPositions(%q) = %v, want %v", i, tc.call, got, tc.want)
			continue
		}
		for j := range got {
			if got[j] != tc.want[j] {
				t.Errorf("%d: keyPositions(%q) = %v, want %v", i, tc.call, got, tc.want)
				break
			}
		}
	}
}

// checkName knows every name of checkNames, with its argument count inside
// CL.ALL (the README's syntax: key, parameters, quantity; -1 for
// CL.RESERVE, whose count its kind gives), without
// allocating.
func TestCheckNameInternsEveryCheck(t *testing.T) {
	args := map[string]int{"cl.throttle": 5, "cl.fixed": 4, "cl.sliding": 4, "cl.slidinglog": 4, "cl.acquire": 4, "cl.reserve": -1}
	if len(args) != len(checkNames) {
		t.Errorf("checkNames %v, want the checks %v", checkNames, args)
	}
	for _, name := range checkNames {
		b := []byte(name)
		got, n := checkName(b)
		if got != name || n != args[name] {
			t.Errorf("checkName(%q) = %q, %d; want %d arguments", name, got, n, args[name])
		}
		if n := testing.AllocsPerRun(100, func() { checkName(b) }); n != 0 {
			t.Errorf("checkName(%q): %v allocs", name, n)
		}
	}
	if got, n := checkName([]byte("cl.peek")); got != "cl.peek" || n != 0 {
		t.Errorf("checkName of an unknown name = %q, %d", got, n)
	}
}
