package commands

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestACLDescribeRoundTrip: for random command rules, the description
// ACL GETUSER and ACL LIST give (describeCmds) applied to a new user gives
// the same command bits, as Redis checks in
// ACLDescribeSelectorCommandRules (it panics on a mismatch).
// 2000 random rule sets from a fixed seed.
func TestACLDescribeRoundTrip(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var vocab []string
	for _, c := range aclCategories {
		vocab = append(vocab, "+@"+c, "-@"+c)
	}
	for _, sp := range s.specs {
		vocab = append(vocab, "+"+sp.Name, "-"+sp.Name)
	}
	vocab = append(vocab, "allcommands", "nocommands", "+select|0", "+get|x")
	rng := rand.New(rand.NewPCG(1, 2))
	checked := 0
	for range 2000 {
		st := s.acl.newState()
		var rules []string
		for range 1 + rng.IntN(8) {
			r := vocab[rng.IntN(len(vocab))]
			if e := s.applyRule(st, []byte(r)); e != aclOK {
				t.Fatalf("%q: %s", r, e)
			}
			rules = append(rules, r)
		}
		sel := &st.sels[0]
		desc := s.describeCmds(sel)
		back := s.acl.newState()
		for _, r := range strings.Fields(desc) {
			if e := s.applyRule(back, []byte(r)); e != aclOK {
				t.Fatalf("rules %q: description %q: %q: %s", rules, desc, r, e)
			}
		}
		b := &back.sels[0]
		if !slices.Equal(sel.cmds, b.cmds) || sel.future != b.future || sel.allCmds != b.allCmds && sel.future {
			t.Fatalf("rules %q: description %q gives other permissions", rules, desc)
		}
		for id, args := range sel.firstArgs {
			// First arguments matter (and are described) only while the
			// command's bit is off, as in Redis.
			if !sel.bit(id) && !slices.Equal(args, b.firstArgs[id]) {
				t.Fatalf("rules %q: description %q: first arguments of %d: %q, want %q", rules, desc, id, b.firstArgs[id], args)
			}
		}
		checked++
	}
	t.Logf("%d rule sets described and applied back", checked)
}
