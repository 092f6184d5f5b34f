package repl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/testwait"
)

// replDBs is how many databases the randomized test writes to.
const replDBs = 4

// backlogBytes is the primary's --repl-backlog-size: small, so that a
// replica cut off while about twice as much is written must resync fully.
const backlogBytes = 256 << 10

// opGen makes random state-changing commands. Keys are named by kind
// ("gcra:7"), so that most commands find a key of their kind; the others
// get WRONGTYPE, which changes nothing and is part of the test. Every
// expiry is an hour or more away, so that nothing expires while nodes are
// compared; the short-lived keys are made apart (shortLived).
type opGen struct {
	r       *rand.Rand
	generic bool // only commands real Redis has (the harness check)
	bigVals bool // 2 KB values, to overflow the backlog
	// Reservations made outside MULTI (key and id), for CL.SETTLE and
	// CL.CANCEL to name; the most recent few are kept.
	reserved []reservation
}

type reservation struct {
	key string
	id  int64
}

// reservationOp returns CL.RESERVE on a limiter key (alone, or two inside
// CL.ALL), or CL.SETTLE or CL.CANCEL of a reservation made earlier (which
// a DEL, SET or FLUSH may have removed since: then an error that changes
// nothing).
func (g *opGen) reservationOp() []any {
	kinds := map[string]string{"gcra": "THROTTLE", "fixed": "FIXED", "sliding": "SLIDING", "log": "SLIDINGLOG"}
	reserve := func(kind string) []any {
		key := g.key(kind)
		a := []any{"CL.RESERVE", key, kinds[kind]}
		if kind == "gcra" {
			a = append(a, 20, 10, 3600)
		} else {
			a = append(a, 10, "87600h")
		}
		return append(a, g.quantity(0), "2h")
	}
	names := []string{"gcra", "fixed", "sliding", "log"}
	switch n := g.r.IntN(10); {
	case n < 5 || len(g.reserved) == 0:
		return reserve(names[g.r.IntN(len(names))])
	case n < 6:
		g.r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		return append(append([]any{"CL.ALL"}, reserve(names[0])...), reserve(names[1])...)
	case n < 7:
		r := g.reserved[g.r.IntN(len(g.reserved))]
		return []any{"CL.CANCEL", r.key, r.id}
	default:
		r := g.reserved[g.r.IntN(len(g.reserved))]
		return []any{"CL.SETTLE", r.key, r.id, g.r.IntN(6)}
	}
}

var (
	limiterKinds = []string{"gcra", "fixed", "sliding", "log", "lease"}
	keysPerKind  = 40
)

func (g *opGen) kinds() []string {
	if g.generic {
		return []string{"str", "xs"}
	}
	return append([]string{"str", "xs"}, limiterKinds...)
}

func (g *opGen) key(kind string) string { return fmt.Sprintf("%s:%d", kind, g.r.IntN(keysPerKind)) }

func (g *opGen) anyKey() string {
	k := g.kinds()
	return g.key(k[g.r.IntN(len(k))])
}

func (g *opGen) value() string {
	n := 1 + g.r.IntN(40)
	if g.bigVals {
		n = 2048
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.IntN(256))
	}
	return string(b)
}

func (g *opGen) quantity(lo int) string { return fmt.Sprint(lo + g.r.IntN(4-lo)) }

func (g *opGen) ms(args []any) []any {
	if g.r.IntN(4) == 0 {
		args = append(args, "MS")
	}
	return args
}

// limiter returns one limiter command for key of kind (as CL.ALL takes it
// when all: with an explicit quantity and no MS).
func (g *opGen) limiter(kind, key string, all bool) []any {
	var a []any
	switch kind {
	case "gcra":
		a = []any{"CL.THROTTLE", key, 20, 10, 3600}
		if all || g.r.IntN(2) == 0 {
			a = append(a, g.quantity(0))
		}
		return a // CL.THROTTLE takes no MS
	case "fixed": // a window of 10 years: its end is far off
		a = []any{"CL.FIXED", key, 10, "87600h", g.quantity(-1)}
	case "sliding":
		a = []any{"CL.SLIDING", key, 10, "87600h", g.quantity(-1)}
	case "log":
		a = []any{"CL.SLIDINGLOG", key, 10, "2h", g.quantity(0)}
	case "lease":
		a = []any{"CL.ACQUIRE", key, 3, "2h", fmt.Sprintf("tok%d", g.r.IntN(5))}
	}
	if all {
		return a
	}
	return g.ms(a)
}

// op returns one state-changing command (never SELECT, MULTI, FLUSH*).
func (g *opGen) op() []any {
	for {
		switch n := g.r.IntN(100); {
		case n < 22:
			if g.r.IntN(3) == 0 {
				return g.stringOp()
			}
			a := []any{"SET", g.key("str"), g.value()}
			switch g.r.IntN(6) {
			case 0:
				a = append(a, "EX", 3600+g.r.IntN(3600))
			case 1:
				a = append(a, "PX", 3600000+g.r.IntN(3600000))
			case 2:
				a = append(a, "KEEPTTL")
			case 3:
				a = append(a, "NX", "PX", 3600000+g.r.IntN(3600000))
			case 4:
				a = append(a, "XX")
			}
			return a
		case n < 30:
			k := 1 + g.r.IntN(3)
			a := []any{"DEL"}
			if g.r.IntN(2) == 0 {
				a[0] = "UNLINK"
			}
			for range k {
				a = append(a, g.anyKey())
			}
			return a
		case n < 38:
			a := []any{"EXPIRE", g.anyKey(), 3600 + g.r.IntN(3600)}
			if g.r.IntN(2) == 0 {
				a = []any{"PEXPIRE", a[1], 3600000 + g.r.IntN(3600000)}
			}
			if g.r.IntN(20) == 0 { // in the past: deletes the key
				a[2] = -1
			}
			if g.r.IntN(3) == 0 {
				a = append(a, []string{"NX", "XX", "GT", "LT"}[g.r.IntN(4)])
			}
			return a
		case n < 42:
			return []any{"PERSIST", g.anyKey()}
		case n < 50:
			return g.streamOp()
		case g.generic:
			continue
		case g.r.IntN(8) == 0:
			return g.reservationOp()
		case n < 52:
			return g.limiter("gcra", g.key("gcra"), false)
		case n < 61:
			return g.limiter("fixed", g.key("fixed"), false)
		case n < 70:
			return g.limiter("sliding", g.key("sliding"), false)
		case n < 79:
			return g.limiter("log", g.key("log"), false)
		case n < 87:
			return g.limiter("lease", g.key("lease"), false)
		case n < 92:
			return []any{"CL.RELEASE", g.key("lease"), fmt.Sprintf("tok%d", g.r.IntN(5))}
		default:
			// CL.ALL over 2 or 3 distinct kinds (so distinct keys).
			kinds := append([]string(nil), limiterKinds...)
			g.r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
			a := []any{"CL.ALL"}
			for _, kind := range kinds[:2+g.r.IntN(2)] {
				a = append(a, g.limiter(kind, g.key(kind), true)...)
			}
			return a
		}
	}
}

// stringOp returns one of the string and counter commands (t_string.c's
// and INCREX) on a "str" key: counters, floats (replicated as the digits
// the primary computed), appends, TTLs set and removed, multi-key sets.
func (g *opGen) stringOp() []any {
	k := g.key("str")
	switch g.r.IntN(10) {
	case 0:
		return []any{"INCRBY", k, g.r.IntN(200) - 100}
	case 1:
		return []any{"INCRBYFLOAT", k, fmt.Sprintf("%.3f", g.r.Float64()*10-5)}
	case 2:
		return []any{"APPEND", k, g.value()}
	case 3:
		return []any{"GETEX", k, "PX", 3600000 + g.r.IntN(3600000)}
	case 4:
		return []any{"GETEX", k, "PERSIST"}
	case 5:
		return []any{"GETSET", k, g.value()}
	case 6:
		return []any{"MSET", k, g.value(), g.key("str"), g.value()}
	case 7:
		return []any{"SETEX", k, 3600 + g.r.IntN(3600), g.value()}
	case 8:
		if g.generic { // Redis 7.0 has no INCREX
			break
		}
		return []any{"INCREX", k, "BYINT", g.r.IntN(5) - 2, "UBOUND", 50, "PX", 3600000, "ENX"}
	}
	return []any{"GETDEL", k}
}

// streamOp returns a stream command on an "xs" key: entries added (IDs
// from the primary's clock, trimmed exactly and approximately), deleted
// and trimmed, and consumer groups created, read (deliveries and their
// times), acknowledged and claimed, so that every change a replica
// applies as a delta is made.
func (g *opGen) streamOp() []any {
	k := g.key("xs")
	grp := fmt.Sprintf("g%d", g.r.IntN(2))
	cons := fmt.Sprintf("c%d", g.r.IntN(3))
	switch g.r.IntN(16) {
	case 0, 1, 2, 3, 4:
		a := []any{"XADD", k}
		switch g.r.IntN(4) {
		case 0:
			a = append(a, "MAXLEN", "~", 5+g.r.IntN(200))
		case 1:
			a = append(a, "MAXLEN", 5+g.r.IntN(20))
		}
		a = append(a, "*", "f", g.value())
		if g.r.IntN(2) == 0 {
			a = append(a, "n", g.r.IntN(1000))
		}
		return a
	case 5:
		return []any{"XTRIM", k, "MAXLEN", []string{"~", "="}[g.r.IntN(2)], g.r.IntN(100)}
	case 6:
		return []any{"XDEL", k, fmt.Sprintf("%d-%d", 0, g.r.IntN(3)), "1-0"}
	case 7:
		return []any{"XGROUP", "CREATE", k, grp, []string{"0", "$"}[g.r.IntN(2)], "MKSTREAM"}
	case 8, 9, 10:
		a := []any{"XREADGROUP", "GROUP", grp, cons, "COUNT", 1 + g.r.IntN(5)}
		if g.r.IntN(5) == 0 {
			a = append(a, "NOACK")
		}
		return append(a, "STREAMS", k, ">")
	case 11:
		return []any{"XAUTOCLAIM", k, grp, cons, 0, "0-0", "COUNT", 1 + g.r.IntN(5)}
	case 12:
		return []any{"XGROUP", "SETID", k, grp, "0"}
	case 13:
		if g.r.IntN(3) == 0 {
			return []any{"XGROUP", "DESTROY", k, grp}
		}
		return []any{"XGROUP", []string{"CREATECONSUMER", "DELCONSUMER"}[g.r.IntN(2)], k, grp, cons}
	}
	// XACK of what a group has pending is not known here: acknowledge
	// the lowest IDs, which the first reads deliver.
	return []any{"XACK", k, grp, "0-1", "1-0", fmt.Sprintf("%d-0", g.r.IntN(1<<20))}
}

// driver applies commands on the primary through one connection, keeping
// track of its SELECTed database, and counts them.
type driver struct {
	t     *testing.T
	conn  *redis.Conn
	g     *opGen
	db    int
	ops   int // commands applied (in MULTI blocks too, SELECT included)
	multi int // MULTI/EXEC blocks
	kinds map[string]int
}

func newDriver(t *testing.T, primary *node, g *opGen) *driver {
	conn := primary.rdb.Conn()
	t.Cleanup(func() { conn.Close() })
	return &driver{t: t, conn: conn, g: g, kinds: map[string]int{}}
}

// acceptable: replies that are part of the test (WRONGTYPE: a command on a
// key of another kind; nil: SET NX/XX that did nothing; NOGROUP: a
// consumer group not made yet).
func acceptable(err error) bool {
	return err == nil || errors.Is(err, redis.Nil) || strings.HasPrefix(err.Error(), "WRONGTYPE ") ||
		strings.HasPrefix(err.Error(), "ERR no such reservation") || strings.HasPrefix(err.Error(), "ERR reservation already settled") ||
		// a counter command on a string that is not a number
		strings.HasPrefix(err.Error(), "ERR value is not an integer") || strings.HasPrefix(err.Error(), "ERR value is not a valid float") ||
		// a stream command on a group or a key not (yet) made
		strings.HasPrefix(err.Error(), "NOGROUP ") || strings.HasPrefix(err.Error(), "BUSYGROUP ") ||
		strings.HasPrefix(err.Error(), "ERR The XGROUP subcommand requires the key to exist")
}

func (d *driver) count(a []any) {
	d.ops++
	d.kinds[strings.ToUpper(fmt.Sprint(a[0]))]++
}

// do runs one command outside MULTI.
func (d *driver) do(a ...any) {
	d.t.Helper()
	cmd := d.conn.Do(context.Background(), a...)
	if err := cmd.Err(); !acceptable(err) {
		d.t.Fatalf("primary: %q: %v", a, err)
	}
	if a[0] == "CL.RESERVE" {
		if reply, err := cmd.Slice(); err == nil && len(reply) == 6 {
			if id, _ := reply[5].(int64); id > 0 {
				d.g.reserved = append(d.g.reserved, reservation{key: a[1].(string), id: id})
				if len(d.g.reserved) > 64 {
					d.g.reserved = d.g.reserved[1:]
				}
			}
		}
	}
	d.count(a)
}

func (d *driver) selectDB(db int) {
	d.t.Helper()
	d.do("SELECT", db)
	d.db = db
}

// step applies one random step: mostly one command, sometimes a SELECT of
// another database, a MULTI/EXEC block (which may SELECT inside), FLUSHDB
// (1 step in 250), or FLUSHALL (1 in 3000).
func (d *driver) step() {
	d.t.Helper()
	r := d.g.r
	if r.IntN(3000) == 0 {
		d.do("FLUSHALL")
		return
	}
	switch n := r.IntN(1000); {
	case n < 4:
		d.do("FLUSHDB")
	case n < 60:
		d.selectDB(r.IntN(replDBs))
	case n < 130:
		d.multiBlock()
	default:
		d.do(d.g.op()...)
	}
}

func (d *driver) multiBlock() {
	d.t.Helper()
	ctx := context.Background()
	var block [][]any
	db := d.db
	for range 2 + d.g.r.IntN(5) {
		if d.g.r.IntN(6) == 0 {
			db = d.g.r.IntN(replDBs)
			block = append(block, []any{"SELECT", db})
			continue
		}
		block = append(block, d.g.op())
	}
	cmds, err := d.conn.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, a := range block {
			p.Do(ctx, a...)
		}
		return nil
	})
	if err != nil && !acceptable(err) {
		d.t.Fatalf("primary: MULTI %q: %v", block, err)
	}
	for i, c := range cmds {
		if !acceptable(c.Err()) {
			d.t.Fatalf("primary: in MULTI: %q: %v", block[i], c.Err())
		}
	}
	for _, a := range block {
		d.count(a)
	}
	d.db = db
	d.multi++
}

// shortLived makes, in every database, keys that expire within about 3 s
// (strings; with limiters, limiter keys whose state empties that fast).
// Their deletion by the primary must reach the replicas. It returns how
// many it made.
func (d *driver) shortLived() int {
	d.t.Helper()
	made := 0
	for db := range replDBs {
		d.selectDB(db)
		for i := range 5 {
			d.do("SET", fmt.Sprintf("short:s:%d", i), "v", "PX", 1000+d.g.r.IntN(2000))
			made++
			if d.g.generic {
				continue
			}
			d.do("CL.THROTTLE", fmt.Sprintf("short:g:%d", i), 1, 1, 1)
			d.do("CL.FIXED", fmt.Sprintf("short:f:%d", i), 5, "1s")
			d.do("CL.SLIDINGLOG", fmt.Sprintf("short:l:%d", i), 3, "1s")
			d.do("CL.ACQUIRE", fmt.Sprintf("short:c:%d", i), 2, "1s", "tok")
			made += 4
		}
	}
	return made
}

func (d *driver) summary() string {
	names := make([]string, 0, len(d.kinds))
	for k := range d.kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%d", k, d.kinds[k])
	}
	return b.String()
}

// syncCounts are the primary's INFO stats resync counters.
func syncCounts(t *testing.T, primary *node) (full, partialOK int64) {
	t.Helper()
	return primary.infoInt(t, "stats", "sync_full"), primary.infoInt(t, "stats", "sync_partial_ok")
}

// primaryOffset is the primary's master_repl_offset.
func primaryOffset(t *testing.T, primary *node) int64 {
	t.Helper()
	return primary.infoInt(t, "replication", "master_repl_offset")
}

// waitExpiredGone waits until the primary has deleted every key that
// expired: no short-lived key is left and DBSIZE equals what SCAN sees
// (SCAN skips expired keys, DBSIZE counts them until they are deleted).
func waitExpiredGone(t *testing.T, timeout time.Duration, primary *node) {
	t.Helper()
	ctx := context.Background()
	testwait.For(t, timeout, "the primary to delete its expired keys", func() (bool, string) {
		for db := range replDBs {
			c := newClient(primary.addr, db)
			keys, err := scanKeys(ctx, primary, db)
			if err != nil {
				c.Close()
				return false, err.Error()
			}
			size, err := c.DBSize(ctx).Result()
			c.Close()
			if err != nil {
				return false, err.Error()
			}
			for _, k := range keys {
				if strings.HasPrefix(k, "short:") {
					return false, fmt.Sprintf("db %d still has %s", db, k)
				}
			}
			if int(size) != len(keys) {
				return false, fmt.Sprintf("db %d: DBSIZE %d, SCAN %d", db, size, len(keys))
			}
		}
		return true, ""
	})
}

// TestReplicationRandomized applies a random sequence of every
// state-changing command on a primary with two replicas, over several
// databases; cuts replica B off twice (through a proxy) so that it
// resyncs once partially and once fully (both seen in the primary's INFO
// stats); restarts replica A as a new process with keys of its own, made a
// replica with REPLICAOF (a full resync that drops them); then compares
// every key's DUMP and PEXPIRETIME on the three nodes, after the
// short-lived keys' deletions have replicated.
func TestReplicationRandomized(t *testing.T) { runRandomized(t, cellserver) }

// TestReplicationHarnessOnRedis runs the same scenario on real Redis 7.0
// with the commands Redis has: it checks the harness, not cellserver.
func TestReplicationHarnessOnRedis(t *testing.T) { runRandomized(t, redisRef) }

func runRandomized(t *testing.T, f flavor) {
	f.need(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	g := &opGen{r: rand.New(rand.NewPCG(seed, seed>>1)), generic: f.redis}
	const linkTimeout = 60 * time.Second

	primary := f.start(t, "primary", nodeOpts{backlog: backlogBytes})
	a := f.start(t, "replica-A", nodeOpts{replicaOf: primary.hostPort()})
	px := startProxy(t, primary.addr)
	b := f.start(t, "replica-B", nodeOpts{replicaOf: px.hostPort()})
	linkUp(t, linkTimeout, a)
	linkUp(t, linkTimeout, b)
	if n := primary.infoInt(t, "replication", "connected_slaves"); n != 2 {
		t.Fatalf("primary: connected_slaves:%d, want 2", n)
	}
	full0, partial0 := syncCounts(t, primary)
	t.Logf("initial syncs: sync_full=%d sync_partial_ok=%d", full0, partial0)

	d := newDriver(t, primary, g)
	for range 700 {
		d.step()
	}
	d.do("FLUSHALL") // at least one, whatever the dice say
	short := d.shortLived()
	for range 1500 {
		d.step()
	}

	// Cut 1: B misses a few writes, well within the backlog, and must
	// resume from its offset.
	px.cut()
	linkDown(t, linkTimeout, b)
	cutAt := primaryOffset(t, primary)
	missed := 0
	for range 200 {
		d.step()
		missed++
		if primaryOffset(t, primary)-cutAt > backlogBytes/4 {
			break
		}
	}
	t.Logf("cut 1: B missed %d steps, %d bytes of stream", missed, primaryOffset(t, primary)-cutAt)
	px.restore()
	linkUp(t, linkTimeout, b)
	caughtUp(t, linkTimeout, primary, a, b)
	full1, partial1 := syncCounts(t, primary)
	if full1 != full0 || partial1 <= partial0 {
		t.Fatalf("after cut 1: sync_full %d -> %d, sync_partial_ok %d -> %d: want a partial resync only", full0, full1, partial0, partial1)
	}

	for range 1000 {
		d.step()
	}

	// Cut 2: B misses twice the backlog and must take a full copy.
	px.cut()
	linkDown(t, linkTimeout, b)
	cutAt = primaryOffset(t, primary)
	g.bigVals = true
	big := 0
	for primaryOffset(t, primary)-cutAt <= 2*backlogBytes {
		d.do("SET", fmt.Sprintf("big:%d", big), g.value(), "EX", 7200)
		big++
		for range 3 {
			d.step()
		}
	}
	g.bigVals = false
	t.Logf("cut 2: B missed %d bytes of stream (backlog %d)", primaryOffset(t, primary)-cutAt, backlogBytes)
	px.restore()
	linkUp(t, linkTimeout, b)
	caughtUp(t, linkTimeout, primary, a, b)
	full2, partial2 := syncCounts(t, primary)
	if full2 <= full1 || partial2 != partial1 {
		t.Fatalf("after cut 2: sync_full %d -> %d, sync_partial_ok %d -> %d: want a full resync", full1, full2, partial1, partial2)
	}

	for range 500 {
		d.step()
	}
	if m := a.info(t, "replication"); m["master_link_status"] != "up" {
		t.Errorf("replica A's link: %s", m["master_link_status"])
	}

	// Restart A: kill -9, then a new process with no data, started as a
	// primary holding keys of its own, made a replica with REPLICAOF at
	// run time. It must take a full copy and drop its own keys (never
	// merge them).
	a.kill()
	a = f.start(t, "replica-A2", nodeOpts{})
	for i := range 20 {
		if err := a.rdb.Set(context.Background(), fmt.Sprintf("stale:%d", i), "mine", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.rdb.Do(context.Background(), "REPLICAOF", "127.0.0.1", strings.Fields(primary.hostPort())[1]).Err(); err != nil {
		t.Fatalf("REPLICAOF on the new A: %v", err)
	}
	linkUp(t, linkTimeout, a)
	caughtUp(t, linkTimeout, primary, a, b)
	full3, partial3 := syncCounts(t, primary)
	if full3 <= full2 || partial3 != partial2 {
		t.Fatalf("after restarting A: sync_full %d -> %d, sync_partial_ok %d -> %d: want a full resync", full2, full3, partial2, partial3)
	}

	for range 500 {
		d.step()
	}

	waitExpiredGone(t, linkTimeout, primary)
	caughtUp(t, linkTimeout, primary, a, b)
	keys := compareNodes(t, replDBs, primary, a, b)
	t.Logf("%d operations (%d MULTI blocks) applied on the primary:%s", d.ops, d.multi, d.summary())
	t.Logf("%d short-lived keys made, deleted everywhere; %d keys compared on 3 nodes (DUMP, PEXPIRETIME); resyncs: sync_full %d -> %d -> %d -> %d, sync_partial_ok %d -> %d -> %d -> %d",
		short, keys, full0, full1, full2, full3, partial0, partial1, partial2, partial3)
	if keys == 0 {
		t.Error("no key left to compare")
	}
}
