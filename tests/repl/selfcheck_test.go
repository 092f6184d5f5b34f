package repl

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The harness checks itself on standalone nodes, which needs no
// replication: the random commands are all accepted by one cellserver
// (only WRONGTYPE is allowed), a node compared with itself shows no
// difference, and nodes that differ are caught.

// TestHarnessGeneratorOnOneNode runs the randomized test's command
// generator (every limiter kind, MULTI, SELECT, FLUSH*) on one cellserver
// and compares the node with itself: the DUMP and PEXPIRETIME of every
// key of every kind read back the same.
func TestHarnessGeneratorOnOneNode(t *testing.T) {
	cellserver.need(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	n := cellserver.start(t, "standalone", nodeOpts{})
	g := &opGen{r: rand.New(rand.NewPCG(seed, seed>>1))}
	d := newDriver(t, n, g)
	d.shortLived()
	for range 3000 {
		d.step()
	}
	waitExpiredGone(t, 60*time.Second, n)
	keys := compareNodes(t, replDBs, n, n)
	t.Logf("%d operations (%d MULTI blocks):%s; %d keys compared", d.ops, d.multi, d.summary(), keys)
	for _, cmd := range []string{"CL.THROTTLE", "CL.FIXED", "CL.SLIDING", "CL.SLIDINGLOG", "CL.ACQUIRE", "CL.RELEASE", "CL.ALL",
		"SET", "DEL", "UNLINK", "EXPIRE", "PEXPIRE", "PERSIST", "FLUSHDB", "SELECT"} {
		if d.kinds[cmd] == 0 {
			t.Errorf("the generator never sent %s", cmd)
		}
	}
	if keys == 0 {
		t.Error("no key to compare")
	}
}

// TestHarnessCatchesDifferences: two standalone nodes given the same keys
// compare equal; a changed value, a changed expiry and a key only on one
// side (also seen in DBSIZE) are each reported.
func TestHarnessCatchesDifferences(t *testing.T) {
	for _, f := range []flavor{cellserver, redisRef} {
		t.Run(f.name, func(t *testing.T) {
			f.need(t)
			x := f.start(t, "x", nodeOpts{})
			y := f.start(t, "y", nodeOpts{})
			ctx := context.Background()
			const far = "4102444800000" // 2100-01-01, in ms
			for _, n := range []*node{x, y} {
				for _, k := range []string{"same", "val", "exp", "onlyx"} {
					if err := n.rdb.Do(ctx, "SET", k, "v", "PXAT", far).Err(); err != nil {
						t.Fatal(err)
					}
				}
				n.rdb.Do(ctx, "SET", "noexp", "v")
			}
			if _, diffs, err := diffNodes(ctx, 2, x, y); err != nil || len(diffs) != 0 {
				t.Fatalf("equal nodes: %v %q", err, diffs)
			}
			y.rdb.Do(ctx, "SET", "val", "w", "KEEPTTL")
			y.rdb.Do(ctx, "SET", "exp", "v", "PXAT", "4102444800001")
			y.rdb.Do(ctx, "DEL", "onlyx")
			y.rdb.Do(ctx, "SET", "same", "v", "PXAT", far) // rewritten, unchanged
			_, diffs, err := diffNodes(ctx, 2, x, y)
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(diffs, "\n")
			for _, want := range []string{`key "val"`, `key "exp"`, `"onlyx"`, "DBSIZE 4"} {
				if !strings.Contains(all, want) {
					t.Errorf("no difference mentions %s:\n%s", want, all)
				}
			}
			if strings.Contains(all, `key "same"`) || strings.Contains(all, `key "noexp"`) {
				t.Errorf("equal keys reported:\n%s", all)
			}
			t.Logf("%d differences found:\n%s", len(diffs), all)
		})
	}
}
