package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/testwait"
)

// The Sentinel settings of every monitored master, as the HA issue set
// them: a quorum of 2 of the 3 sentinels, a master down after 1 s without
// a reply, a failover given 3 s.
const (
	Quorum          = 2
	DownAfter       = 1000 * time.Millisecond
	FailoverTimeout = 3000 * time.Millisecond
)

// Monitor is one master the sentinels watch.
type Monitor struct {
	Name string // the master's name (SENTINEL MONITOR <name>)
	Addr string // the master's host:port
	// Replicas is how many replicas the master has: the sentinels are
	// settled once they see them all linked.
	Replicas int
	// ReconfigScript is the client-reconfig-script, "" for none.
	ReconfigScript string
}

// Sentinel is one redis-sentinel process and a client on it.
type Sentinel struct {
	Name string
	Addr string
	Dir  string // its working directory, holding Conf
	Conf string // its config file, which Sentinel rewrites
	P    *Proc
	C    *redis.SentinelClient
}

// SentinelEnv, if not nil, is the environment StartSentinels adds for a
// sentinel (Name, Addr and Dir are set when it is called).
type SentinelEnv func(s *Sentinel) []string

// StartSentinels starts one redis-sentinel per port, each from a fresh
// config in its own directory under root monitoring ms, and returns once
// they are settled on every master (WaitSettled, 30 s at most): each sees
// the master at its address, its replicas linked and the other sentinels.
// The processes are killed and the clients closed when t ends; their logs
// are printed if t failed or CELLSERVER_HA_LOGS is set.
//
// While they settle, a CPU stall of up to 10 s does not put them into
// TILT mode (30 s without any action; the default trigger is 2 s, which a
// loaded CI machine under -race can reach) and hellos go every 250 ms
// instead of 2 s, so that the sentinels find each other sooner; the hello
// period is back to its default before StartSentinels returns.
func StartSentinels(t testing.TB, root string, ports []int, env SentinelEnv, ms ...Monitor) []*Sentinel {
	t.Helper()
	return StartSentinelsAt(t, Loopback, root, ports, env, ms...)
}

// StartSentinelsAt is StartSentinels with the sentinels run at place,
// bound to and announcing its address.
func StartSentinelsAt(t testing.TB, place Place, root string, ports []int, env SentinelEnv, ms ...Monitor) []*Sentinel {
	t.Helper()
	var ss []*Sentinel
	for i, port := range ports {
		s := &Sentinel{Name: fmt.Sprintf("sentinel-%d", i), Addr: place.Addr(port), Dir: filepath.Join(root, fmt.Sprintf("sentinel%d", i))}
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s.Conf = filepath.Join(s.Dir, "sentinel.conf")
		conf := fmt.Sprintf("bind %s\nport %d\ndir %s\nsentinel announce-ip %s\n", place.IP, port, s.Dir, place.IP)
		for _, m := range ms {
			conf += fmt.Sprintf("sentinel monitor %s %s %d\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s %d\n",
				m.Name, strings.ReplaceAll(m.Addr, ":", " "), Quorum, m.Name, DownAfter.Milliseconds(), m.Name, FailoverTimeout.Milliseconds())
			if m.ReconfigScript != "" {
				conf += fmt.Sprintf("sentinel client-reconfig-script %s %s\n", m.Name, m.ReconfigScript)
			}
		}
		if err := os.WriteFile(s.Conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		var vars []string
		if env != nil {
			vars = env(s)
		}
		s.P = StartAt(t, place, s.Name, vars, "redis-sentinel", s.Conf)
		s.C = redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Protocol: 2, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
		t.Cleanup(func() { s.C.Close() })
		ss = append(ss, s)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CELLSERVER_HA_LOGS") != "" {
			for _, s := range ss {
				t.Logf("--- %s (%s) log:\n%s", s.Name, s.Addr, s.P.Logs)
			}
		}
	})
	for _, s := range ss {
		WaitPing(t, s.P, s.Addr, 20*time.Second)
	}
	SentinelDebug(t, ss, "tilt-trigger", 10000, "publish-period", 250)
	for _, m := range ms {
		WaitSettled(t, ss, m.Name, m.Addr, m.Replicas, m.Replicas, 30*time.Second)
	}
	SentinelDebug(t, ss, "publish-period", 2000)
	return ss
}

// SentinelDebug runs SENTINEL DEBUG args (Sentinel's internal periods) on
// every sentinel.
func SentinelDebug(t testing.TB, ss []*Sentinel, args ...any) {
	t.Helper()
	ctx := context.Background()
	for _, s := range ss {
		if err := s.C.Process(ctx, redis.NewStatusCmd(ctx, append([]any{"SENTINEL", "DEBUG"}, args...)...)); err != nil {
			t.Fatalf("%s: SENTINEL DEBUG %v: %v", s.Name, args, err)
		}
	}
}

// MasterAddrs returns what each sentinel answers to SENTINEL
// GET-MASTER-ADDR-BY-NAME name ("" for an error).
func MasterAddrs(ctx context.Context, ss []*Sentinel, name string) []string {
	var out []string
	for _, s := range ss {
		hp, err := s.C.GetMasterAddrByName(ctx, name).Result()
		if err != nil || len(hp) != 2 {
			out = append(out, "")
			continue
		}
		out = append(out, net.JoinHostPort(hp[0], hp[1]))
	}
	return out
}

// Agreed returns the address every sentinel reports, or "".
func Agreed(addrs []string) string {
	for _, a := range addrs {
		if a == "" || a != addrs[0] {
			return ""
		}
	}
	return addrs[0]
}

// WaitSettled waits (timeout at most) until every sentinel reports the
// same master for name (at addr, unless addr is "") with flags exactly
// "master" (no failover in progress), replicas replicas of which linked
// have flags "slave" and master-link-status ok, every other sentinel, and
// SENTINEL CKQUORUM OK. It returns the master's address.
func WaitSettled(t testing.TB, ss []*Sentinel, name, addr string, replicas, linked int, timeout time.Duration) string {
	t.Helper()
	ctx := context.Background()
	what := fmt.Sprintf("the sentinels settle on %s with %d replicas, %d of them linked", name, replicas, linked)
	if addr != "" {
		what += " at " + addr
	}
	others := strconv.Itoa(len(ss) - 1)
	var master string
	testwait.For(t, timeout, what, func() (bool, string) {
		master = ""
		for _, s := range ss {
			m, err := s.C.Master(ctx, name).Result()
			if err != nil {
				return false, s.Name + ": SENTINEL MASTER: " + err.Error()
			}
			got := net.JoinHostPort(m["ip"], m["port"])
			if master == "" {
				master = got
			}
			if got != master || addr != "" && got != addr || m["flags"] != "master" ||
				m["num-slaves"] != strconv.Itoa(replicas) || m["num-other-sentinels"] != others {
				return false, fmt.Sprintf("%s: master %s flags %q num-slaves %s num-other-sentinels %s",
					s.Name, got, m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			reps, err := s.C.Replicas(ctx, name).Result()
			if err != nil {
				return false, s.Name + ": SENTINEL REPLICAS: " + err.Error()
			}
			ok := 0
			for _, r := range reps {
				if r["flags"] == "slave" && r["master-link-status"] == "ok" {
					ok++
				}
			}
			if len(reps) != replicas || ok != linked {
				return false, fmt.Sprintf("%s: %d replicas, %d of them with flags slave and link ok: %v", s.Name, len(reps), ok, reps)
			}
			if q, err := s.C.CkQuorum(ctx, name).Result(); err != nil || !strings.HasPrefix(q, "OK") {
				return false, fmt.Sprintf("%s: CKQUORUM %q %v", s.Name, q, err)
			}
		}
		return true, ""
	})
	return master
}

// Addrs lists the sentinels' addresses.
func Addrs(ss []*Sentinel) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Addr)
	}
	return out
}
