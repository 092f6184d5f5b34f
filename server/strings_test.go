package server_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// stringWrites applies n random string and counter commands (t_string.c's,
// and INCREX) to rdb, over a few keys so that they meet: counters, floats,
// appends, TTLs set, kept and removed, deletions, multi-key sets.
func stringWrites(t *testing.T, rdb *redis.Client, rng *rand.Rand, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		key := "s" + strconv.Itoa(rng.IntN(40))
		other := "s" + strconv.Itoa(rng.IntN(40))
		var args []any
		switch rng.IntN(16) {
		case 0:
			args = []any{"INCR", key}
		case 1:
			args = []any{"INCRBY", key, rng.IntN(2000) - 1000}
		case 2:
			args = []any{"DECRBY", key, rng.IntN(100)}
		case 3:
			args = []any{"INCRBYFLOAT", key, strconv.FormatFloat(rng.Float64()*10-5, 'g', -1, 64)}
		case 4:
			args = []any{"APPEND", key, strconv.Itoa(rng.IntN(10))}
		case 5:
			args = []any{"GETEX", key, "EX", 3600 + rng.IntN(100)}
		case 6:
			args = []any{"GETEX", key, "PERSIST"}
		case 7:
			args = []any{"GETDEL", key}
		case 8:
			args = []any{"GETSET", key, strconv.Itoa(rng.IntN(100))}
		case 9:
			args = []any{"MSET", key, strconv.Itoa(rng.IntN(100)), other, "v"}
		case 10:
			args = []any{"MSETNX", key, "1", other, "2"}
		case 11:
			args = []any{"SETNX", key, "7"}
		case 12:
			args = []any{"SETEX", key, 3600, strconv.Itoa(rng.IntN(100))}
		case 13:
			args = []any{"PSETEX", key, 3600000, "1.5"}
		case 14:
			args = []any{"INCREX", key, "BYINT", rng.IntN(7) - 3, "LBOUND", -5, "UBOUND", 5, "EX", 3600, "ENX"}
		case 15:
			args = []any{"INCREX", key, "BYFLOAT", "0.1", "UBOUND", 3, "SATURATE", "PERSIST"}
		}
		err := rdb.Do(ctx, args...).Err()
		if err != nil && err != redis.Nil && !strings.HasPrefix(err.Error(), "ERR value is not") {
			t.Fatalf("%v: %v", args, err)
		}
	}
}

// TestStringsReplicated: a replica following random string and counter
// writes ends with the primary's entries byte for byte (the journal
// carries values: INCRBYFLOAT's digits, as Redis replicates it as a SET).
func TestStringsReplicated(t *testing.T) {
	primary := startNode(t, server.Config{})
	ph, pp := primary.hostPort()
	replica := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
	rng := rand.New(rand.NewPCG(30, 1))
	stringWrites(t, primary.rdb, rng, 3000)
	waitInSync(t, primary, replica)
	if n := sameState(t, primary, replica); n == 0 {
		t.Fatal("no keys compared")
	}
}

// TestStringsPersisted: with a data directory the string commands' state
// survives a restart, values and TTLs alike.
func TestStringsPersisted(t *testing.T) {
	ctx := context.Background()
	s := cellservertest.Run(t, cellservertest.WithConfig(func(c *server.Config) {
		c.DataDir, c.OpenStore, c.Fsync = t.TempDir(), changelog.Opener(pebblestore.OpenStore, changelog.Options{}), "always"
	}))
	rdb := newGCRAClient(t, s.Addr())
	stringWrites(t, rdb, rand.New(rand.NewPCG(30, 2)), 1000)
	snapshot := func() map[string]string {
		out := map[string]string{}
		for i := 0; i < 40; i++ {
			key := "s" + strconv.Itoa(i)
			v, err := rdb.Get(ctx, key).Result()
			if err == redis.Nil {
				continue
			}
			ttl, err2 := rdb.TTL(ctx, key).Result()
			if err != nil || err2 != nil {
				t.Fatalf("GET/TTL %s: %v %v", key, err, err2)
			}
			out[key] = v + " ttl>0:" + strconv.FormatBool(ttl > 0)
		}
		return out
	}
	before := snapshot()
	if len(before) == 0 {
		t.Fatal("no keys written")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	after := snapshot()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s after restart = %q, want %q", k, after[k], v)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d keys after restart, %d before", len(after), len(before))
	}
}
