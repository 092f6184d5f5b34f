// Package partition measures what a rate limiter admits beyond its limit
// when its primary fails, Jepsen-style: real processes on a real (if
// virtual) network, faults injected under load, and every reply a client
// saw checked against the limit afterwards.
//
// # Setup
//
// Each run builds a fresh network of namespaces (harness.NewNet): three
// cellserver nodes (a primary and two replicas) in a namespace each,
// three real redis-sentinel processes (quorum 2, down-after-milliseconds
// 1000, failover-timeout 3000) in a fourth, and the test process, which
// runs the clients, on the same bridge. The load is 32 goroutines on one
// go-redis FailoverClient, on 20 keys at about twice the limit, with no
// retries: every reply (admitted, refused or an error) is kept with the
// instants it was sent and received.
//
// # Faults
//
//   - none: load only, the checker's control: it must find 0.
//   - kill9: the primary is killed with SIGKILL.
//   - partition: the primary is cut from its replicas and the sentinels
//     (ip rule blackholes, both ways) while the clients still reach it;
//     the sentinels fail over, the clients move, the cut heals and the old
//     primary must rejoin as a replica.
//   - replicaloss: one replica is killed with SIGKILL.
//
// The load runs until the fault has played out (the sentinels agreed on a
// new primary and the clients' connections moved there), plus 1.5 s.
//
// # Figures
//
// CL.FIXED (100 per 1 s window): the admissions of each key-window beyond
// the limit; each admission is put in its window from the reply's
// reset_after (in ms), not the client's clock alone. CL.THROTTLE (99 100
// 1, GCRA: a burst of 100, 100 per second): for each key the largest
// excess, over any interval [a, b], of admissions over 100 + 100*(b-a),
// counted conservatively (throttleLimit.over). Both are exact, so a run
// without faults measures 0. Also the longest time without an admission
// (on one key, and on all) and the client errors by kind.
//
// With --sync-replicas 1 every run must measure 0 over-admission. The
// asynchronous figures are printed, not asserted (unless
// CELLSERVER_PARTITION_STRICT=1, which shows that the check fails).
// CELLSERVER_PARTITION_RUNS=n repeats every run n times and prints a
// summary table; CELLSERVER_PARTITION_MODES=async,sync,minreplicas adds
// --min-replicas-to-write 1 --min-replicas-max-lag 1 (printed only).
package partition

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // its failover notices would interleave with the test output
	binproc.Main(m)
}

// quiet discards go-redis's log.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// mode is how the nodes replicate.
type mode struct {
	name string
	args []string // the nodes' flags
	flag string   // the flag the build must have, "" for none
	// zero: every run must measure 0 over-admission.
	zero bool
}

// modes are the replication modes; CELLSERVER_PARTITION_MODES (a comma
// list of names) picks others than the default async and sync.
var modes = []mode{
	{name: "async"},
	{name: "sync", args: []string{"--sync-replicas", "1"}, flag: "--sync-replicas", zero: true},
	// Redis's safeguard: refuse writes unless a replica acknowledged
	// within the last second (at 1 s granularity).
	{name: "minreplicas", args: []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"}},
}

const defaultModes = "async,sync"

var limits = []limit{
	fixedLimit{limit: 100, period: time.Second},
	throttleLimit{burst: 99, count: 100, period: time.Second},
}

// scenario is a fault and what the run waits for after injecting it.
type scenario struct {
	name   string
	inject func(r *run)
}

var scenarios = []scenario{
	{"none", func(r *run) { r.loadFor(2 * time.Second) }},
	{"kill9", func(r *run) {
		old := r.cl.nodes[0]
		old.p.Kill()
		r.failover(old)
	}},
	{"partition", func(r *run) {
		old := r.cl.nodes[0]
		r.cl.net.Cut(old.host, r.cl.nodes[1].host, r.cl.nodes[2].host, r.cl.senHost)
		primary := r.failover(old)
		// Sentinel asks a replica (which the old primary now is to it)
		// for INFO every 10 s, and converts one that says master once it
		// has said so, and been up, for 4 hello periods (8 s): shorter
		// periods shorten the rejoin, not the failover.
		harness.SentinelDebug(r.t, r.cl.sentinels, "info-period", 1000, "publish-period", 250)
		healAt := time.Now()
		r.cl.net.Heal(old.host, r.cl.nodes[1].host, r.cl.nodes[2].host, r.cl.senHost)
		harness.WaitReplicaOf(r.t, old.name, old.addr, primary.addr, 30*time.Second)
		r.note = fmt.Sprintf("%s rejoined as a replica of %s %v after the heal", old.name, primary.name, time.Since(healAt).Round(time.Millisecond))
	}},
	{"replicaloss", func(r *run) {
		lost := r.cl.nodes[2]
		lost.p.Kill()
		r.cl.waitReplicaDown(lost, 20*time.Second)
		r.loadFor(time.Second)
	}},
}

// run is one scenario in one mode with one command.
type run struct {
	t       *testing.T
	cl      *cluster
	load    *load
	faultAt time.Time
	// switched: from the fault to the sentinels' agreement on a new
	// primary, and to the clients' connections being there.
	switched, moved time.Duration
	note            string
}

// loadFor waits until the load has run d since the fault.
func (r *run) loadFor(d time.Duration) {
	r.t.Helper()
	testwait.Until(r.t, d+10*time.Second, fmt.Sprintf("%v of load after the fault", d), func() bool {
		return time.Since(r.faultAt) >= d
	})
}

// failover waits until the sentinels agree on a primary other than old
// and at least half the load's connections are on it, then lets the
// load run 1.5 s more (past the window in which the clients moved). It
// returns the new primary.
func (r *run) failover(old *node) *node {
	r.t.Helper()
	primary := r.cl.waitSwitch(old, 30*time.Second)
	r.switched = time.Since(r.faultAt)
	testwait.For(r.t, 30*time.Second, "the load's clients use "+primary.name, func() (bool, string) {
		n, err := loadConns(context.Background(), primary)
		if err != nil {
			return false, err.Error()
		}
		return n >= workers/2, fmt.Sprintf("%d of the load's connections there", n)
	})
	r.moved = time.Since(r.faultAt)
	since := time.Now()
	testwait.Until(r.t, 15*time.Second, "1.5 s of load on the new primary", func() bool {
		return time.Since(since) >= 1500*time.Millisecond
	})
	return primary
}

// result is one run's figures with what identifies it.
type result struct {
	scenario, mode, command string
	n                       int
	f                       figures
	switched, moved         time.Duration
}

func TestPartition(t *testing.T) {
	harness.NeedNetns(t)
	harness.NeedProcesses(t, "redis-sentinel")
	harness.NeedReplication(t)
	runs := 1
	if s := os.Getenv("CELLSERVER_PARTITION_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 20 {
			t.Fatalf("CELLSERVER_PARTITION_RUNS=%q: want 1..20", s)
		}
		runs = n
	}
	strict := os.Getenv("CELLSERVER_PARTITION_STRICT") == "1"
	names := os.Getenv("CELLSERVER_PARTITION_MODES")
	if names == "" {
		names = defaultModes
	}
	var runModes []mode
	for _, name := range strings.Split(names, ",") {
		i := slices.IndexFunc(modes, func(m mode) bool { return m.name == name })
		if i < 0 {
			t.Fatalf("CELLSERVER_PARTITION_MODES: no mode %q", name)
		}
		runModes = append(runModes, modes[i])
	}
	var results []result
	t.Cleanup(func() { fmt.Print(markdown(results, runs > 1)) })
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, md := range runModes {
				t.Run(md.name, func(t *testing.T) {
					if md.flag != "" {
						harness.NeedFlag(t, md.flag)
					}
					for _, lim := range limits {
						t.Run(lim.name(), func(t *testing.T) {
							for i := 1; i <= runs; i++ {
								res := result{scenario: sc.name, mode: md.name, command: lim.name(), n: i}
								t.Run(fmt.Sprintf("run%d", i), func(t *testing.T) {
									res.f, res.switched, res.moved = runOne(t, sc, md, lim)
									if t.Failed() {
										return
									}
									results = append(results, res)
									if md.zero || sc.name == "none" || strict {
										if res.f.totalOver != 0 {
											t.Errorf("%s/%s/%s: over-admission %d in total, %d at most per key-window; must be 0\n%s",
												sc.name, md.name, lim.name(), res.f.totalOver, res.f.maxOver, res.f.worst)
										}
									}
									if sc.name == "none" && res.f.failed != 0 {
										t.Errorf("no fault, yet %s client errors", res.f.errSummary())
									}
								})
							}
						})
					}
				})
			}
		})
	}
}

// runOne runs sc in md with lim on a fresh cluster and returns its
// figures and failover times.
func runOne(t *testing.T, sc scenario, md mode, lim limit) (figures, time.Duration, time.Duration) {
	testwait.SetBudget(t, 2*time.Minute)
	began := time.Now()
	cl := newCluster(t, md.args)
	setup := time.Since(began)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    masterName,
		SentinelAddrs: harness.Addrs(cl.sentinels),
		ClientName:    loadClientName,
		Protocol:      2,
		DialTimeout:   time.Second,
		ReadTimeout:   2 * time.Second,
		WriteTimeout:  time.Second,
		PoolSize:      workers,
		MaxRetries:    -1, // every attempt is recorded as it went
	})
	defer fc.Close()
	l := startLoad(fc, lim)
	t.Cleanup(l.cancel) // a failed wait must not leave the workers running
	testwait.Until(t, 20*time.Second, "1.5 s of load with an admission on every key", func() bool {
		return time.Since(l.start) >= 1500*time.Millisecond && l.allKeysAdmitted()
	})
	r := &run{t: t, cl: cl, load: l, faultAt: time.Now()}
	sc.inject(r)
	replies, end := l.stop(t)
	f := analyze(lim, replies, end)
	t.Logf("%s/%s/%s: setup %v, load %v; %d requests, %d admitted, %d refused, errors %s; over-admission max %d per key-window, %d in total (%d admissions of ambiguous window); longest without admission %v on a key, %v on all; sentinels switched %v after the fault, clients moved %v. %s",
		sc.name, md.name, lim.name(), setup.Round(time.Millisecond), end.Sub(l.start).Round(time.Millisecond),
		f.requests, f.admitted, f.refused, f.errSummary(), f.maxOver, f.totalOver, f.ambiguous,
		f.maxGapKey.Round(time.Millisecond), f.maxGap.Round(time.Millisecond),
		r.switched.Round(time.Millisecond), r.moved.Round(time.Millisecond), r.note)
	if f.worst != "" && os.Getenv("CELLSERVER_PARTITION_LOGS") != "" {
		t.Logf("worst over-admission:\n%s", f.worst)
	}
	return f, r.switched, r.moved
}

// markdown renders the results as a table, and with summary a table of
// the ranges (min-max) over the runs of each scenario, mode and command.
func markdown(rs []result, summary bool) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| scenario | mode | command | run | requests | admitted | errors | max over per key-window | total over | longest no-admission (key / all) | sentinels switched / clients moved |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %s | %d | %d | %v / %v | %s |\n",
			r.scenario, r.mode, r.command, r.n, r.f.requests, r.f.admitted, r.f.errSummary(),
			r.f.maxOver, r.f.totalOver, r.f.maxGapKey.Round(time.Millisecond), r.f.maxGap.Round(time.Millisecond), switchCell(r.switched, r.moved))
	}
	if !summary {
		return b.String()
	}
	b.WriteString("\n| scenario | mode | command | runs | max over per key-window | total over | longest no-admission on a key | on all keys | client errors | sentinels switched | clients moved |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	type group struct{ scenario, mode, command string }
	var order []group
	by := map[group][]result{}
	for _, r := range rs {
		g := group{r.scenario, r.mode, r.command}
		if by[g] == nil {
			order = append(order, g)
		}
		by[g] = append(by[g], r)
	}
	for _, g := range order {
		gs := by[g]
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", g.scenario, g.mode, g.command, len(gs),
			span(gs, func(r result) float64 { return float64(r.f.maxOver) }, "%.0f", ""),
			span(gs, func(r result) float64 { return float64(r.f.totalOver) }, "%.0f", ""),
			span(gs, func(r result) float64 { return r.f.maxGapKey.Seconds() }, "%.2f s", ""),
			span(gs, func(r result) float64 { return r.f.maxGap.Seconds() }, "%.2f s", ""),
			span(gs, func(r result) float64 { return float64(r.f.failed) }, "%.0f", ""),
			span(gs, func(r result) float64 { return r.switched.Seconds() }, "%.2f s", "-"),
			span(gs, func(r result) float64 { return r.moved.Seconds() }, "%.2f s", "-"))
	}
	return b.String()
}

func switchCell(switched, moved time.Duration) string {
	if switched == 0 {
		return "-"
	}
	return fmt.Sprintf("%v / %v", switched.Round(time.Millisecond), moved.Round(time.Millisecond))
}

// span formats the range of get over rs: "v" or "lo–hi", and "-" when
// every value is 0 and zero is "-" (no failover in the scenario).
func span(rs []result, get func(result) float64, format, zero string) string {
	lo, hi := get(rs[0]), get(rs[0])
	for _, r := range rs[1:] {
		lo, hi = min(lo, get(r)), max(hi, get(r))
	}
	if hi == 0 && zero != "" {
		return zero
	}
	l, h := fmt.Sprintf(format, lo), fmt.Sprintf(format, hi)
	if l == h {
		return l
	}
	return l + "–" + h
}
