package commands

import (
	"strings"
	"testing"

	"github.com/cellserver/cellserver/keyslot"
)

// TestResolveKeys: the dispatcher's keys are the spec's key arguments, in
// order, each with its hash's shard (the one keyspace.DB.Shard picks), and
// with its hash slot in cluster mode only.
func TestResolveKeys(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	cl := &client{}
	x := &cl.x
	x.s, x.cl = s, cl
	cases := 0
	for _, cluster := range []bool{false, true} {
		s.cluster.on = cluster
		for _, tc := range []struct{ call, keys string }{
			{"get {user42}:a", "{user42}:a"},
			{"cl.throttle", ""},
			{"del a b {user42}:c d e f", "a b {user42}:c d e f"},
			{"cl.all cl.throttle a 1 2 3 1 cl.fixed b 5 60 1 ms cl.throttle c 1 2 3 1", "a b c"},
			{"cl.all cl.throttle a 1 2", ""},
			{"memory usage k samples 5", "k"},
			{"ping", ""},
		} {
			x.args = nil
			for _, f := range strings.Fields(tc.call) {
				x.args = append(x.args, []byte(f))
			}
			sp := s.table[string(x.args[0])]
			if sp.subs != nil {
				sp = sp.subs[string(x.args[1])]
			}
			db := s.ks.DB(0)
			x.resolveKeys(sp, db)
			want := strings.Fields(tc.keys)
			if len(x.keys) != len(want) {
				t.Fatalf("%q: %d keys, want %q", tc.call, len(x.keys), want)
			}
			for i, k := range x.keys {
				if string(k.key) != want[i] || k.hash != s.ks.Hash(k.key) || k.sh != db.Shard(k.key) {
					t.Errorf("%q: key %d is %q (hash %x, shard %p), want %q", tc.call, i, k.key, k.hash, k.sh, want[i])
				}
				wantSlot := uint16(0)
				if cluster {
					wantSlot = keyslot.Of(k.key)
				}
				if k.slot != wantSlot {
					t.Errorf("%q (cluster %v): key %q slot %d, want %d", tc.call, cluster, k.key, k.slot, wantSlot)
				}
			}
			x.doneKeys()
			cases++
		}
	}
	t.Logf("%d calls", cases)
}
