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
//   - bothlost: the primary and one replica are killed with SIGKILL at
//     once, the remaining replica is promoted. The replica killed is the
//     worst one to lose: the one with the larger acknowledged offset in
//     the primary's INFO read just before the kill (with --sync-replicas
//     1 a reply waits for one replica only, so an acknowledged change may
//     be on that one alone; killing the other loses nothing
//     acknowledged). It comes back, empty, as a replica of the new
//     primary once the clients moved there: a lone primary refuses
//     writes in the modes that need a replica. This is more than
//     --sync-replicas 1 guards against (N replicas and the primary lost
//     at once): its figures are printed in every mode, not asserted.
//   - bothlostcut (opt-in): bothlost after one replica was cut from the
//     primary for 500 ms (and stays cut from it), so that the other one
//     alone acknowledged those 500 ms: the cut one, promoted, lacks them.
//     Printed, not asserted. With 1 s windows what a failover of about
//     2.5 s forgets lies in windows already over (and a GCRA burst
//     refilled meanwhile): use 10 s windows to see it.
//
// The load runs until the fault has played out (the sentinels agreed on a
// new primary and the clients' connections moved there), plus 1.5 s or
// a window of the limit if longer.
//
// # Modes
//
//   - async: asynchronous replication, the default.
//   - sync: --sync-replicas 1.
//   - minreplicas: --min-replicas-to-write 1 --min-replicas-max-lag 1.
//   - wait: asynchronous servers; each client sends WAIT 1 500 with its
//     command, in one pipeline on one connection, and takes an admission
//     as admitted only if WAIT answered 1 (else the error "wait-short").
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
// The 10 s windows (CL.FIXED 1000 per 10 s, CL.THROTTLE 999 1000 10) keep
// the rate and make what a failover forgets last a window: the fault
// comes once every key used up its burst (CL.THROTTLE, 10 s of load) or
// 500 ms into a window (CL.FIXED: early, so that the window still admits
// when the new primary takes over, and all it forgot is admitted again),
// and the load runs a whole window after the clients moved. A CL.FIXED window at twice its limit admits in its first half
// only, so its longest time without an admission is 5 s even without a
// fault.
//
// With --sync-replicas 1 every run must measure 0 over-admission, except
// in bothlost. The other figures are printed, not asserted (unless
// CELLSERVER_PARTITION_STRICT=1, which shows that the check fails).
//
// # Environment
//
//   - CELLSERVER_PARTITION_RUNS=n repeats every run n times and prints a
//     summary table, and the contract: modes by faults.
//   - CELLSERVER_PARTITION_MODES, a comma list (default async,sync).
//   - CELLSERVER_PARTITION_FAULTS, a comma list (default
//     none,kill9,partition,replicaloss,bothlost).
//   - CELLSERVER_PARTITION_WINDOWS=1s,10s (default 1s).
//   - CELLSERVER_PARTITION_LOGS=1 prints the worst window's replies and
//     every node's log.
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

// mode is how the nodes replicate, and what the clients require.
type mode struct {
	name string
	args []string // the nodes' flags
	flag string   // the flag the build must have, "" for none
	// wait, if not 0, makes each client send WAIT 1 wait (ms) with its
	// command and count an admission only when WAIT answered 1.
	wait time.Duration
	// zero: every run must measure 0 over-admission (but in a scenario
	// that loses more than the mode guards against, mayLose).
	zero bool
	// idleErr is an error kind the mode may give without a fault (the
	// control fails on any other).
	idleErr string
}

// modes are the replication modes; CELLSERVER_PARTITION_MODES (a comma
// list of names) picks others than the default async and sync.
var modes = []mode{
	{name: "async"},
	{name: "sync", args: []string{"--sync-replicas", "1"}, flag: "--sync-replicas", zero: true},
	// Redis's safeguard: refuse writes unless a replica acknowledged
	// within the last second (at 1 s granularity: on a loaded machine a
	// few refusals come without any fault).
	{name: "minreplicas", args: []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"}, idleErr: "NOREPLICAS"},
	// The client's safeguard on an asynchronous server: WAIT after each
	// command, on the same connection, and refuse what it did not confirm.
	{name: "wait", wait: 500 * time.Millisecond},
}

const defaultModes = "async,sync"

// windowSet is the limits, one per command, with windows of one length.
type windowSet struct {
	name   string
	limits []limit
}

// windowSets are the limits by window; CELLSERVER_PARTITION_WINDOWS (a
// comma list of names) picks others than the default 1s.
var windowSets = []windowSet{
	{"1s", []limit{
		fixedLimit{limit: 100, period: time.Second},
		throttleLimit{burst: 99, count: 100, period: time.Second},
	}},
	// The same rate (100 per second per key) over windows 10 times
	// longer: what a failover forgets is no longer forgiven by the end
	// of the window a second later.
	{"10s", []limit{
		fixedLimit{limit: 1000, period: 10 * time.Second, phase: 500 * time.Millisecond},
		throttleLimit{burst: 999, count: 1000, period: 10 * time.Second},
	}},
}

const defaultWindows = "1s"

// scenario is a fault and what the run waits for after injecting it.
type scenario struct {
	name   string
	inject func(r *run)
	// mayLose: the fault takes more than --sync-replicas 1 guards
	// against; its figures are printed in every mode, not asserted.
	mayLose bool
}

var scenarios = []scenario{
	{name: "none", inject: func(r *run) { r.loadFor(max(2*time.Second, r.lim.window())) }},
	{name: "kill9", inject: func(r *run) {
		old := r.cl.nodes[0]
		old.p.Kill()
		r.failover(old)
	}},
	{name: "partition", inject: func(r *run) {
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
	{name: "replicaloss", inject: func(r *run) {
		lost := r.cl.nodes[2]
		lost.p.Kill()
		r.cl.waitReplicaDown(lost, 20*time.Second)
		r.loadFor(max(time.Second, r.lim.window()))
	}},
	// The primary and its most up-to-date replica die together: with
	// --sync-replicas 1 an acknowledged change may be on that replica
	// only, and the one Sentinel can still promote may lack it. The
	// replica with the larger acknowledged offset in the primary's INFO
	// just before the kill is the one killed (the worst case; killing
	// the other loses nothing acknowledged). A promoted replica alone
	// refuses writes in the modes that need one (sync, minreplicas) and
	// fails WAIT, so the killed replica comes back, empty, as a replica
	// of the new primary once the clients moved there.
	{name: "bothlost", mayLose: true, inject: func(r *run) { r.bothLost(r.cl.nodes[0]) }},
	// bothlost after one replica was cut from the primary for 500 ms
	// (and stays cut from it): the primary went on with the other, which
	// acknowledged what the cut one never got, then the primary and the
	// other die. The cut replica is promoted without 500 ms of
	// acknowledged changes: the limit of --sync-replicas 1, shown.
	{name: "bothlostcut", mayLose: true, inject: func(r *run) {
		old, cut := r.cl.nodes[0], r.cl.nodes[2]
		r.cl.net.Cut(old.host, cut.host) // never healed: the dead primary's kernel would send it what it missed
		since := time.Now()
		testwait.Until(r.t, 10*time.Second, "500 ms of load with "+cut.name+" cut from the primary", func() bool {
			return time.Since(since) >= 500*time.Millisecond
		})
		r.bothLost(old)
	}},
}

const defaultFaults = "none,kill9,partition,replicaloss,bothlost"

// run is one scenario in one mode with one command.
type run struct {
	t       *testing.T
	cl      *cluster
	lim     limit
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
// and the load's clients moved there (switchTo), then lets the load run
// on (settle). It returns the new primary.
func (r *run) failover(old *node) *node {
	r.t.Helper()
	primary := r.switchTo(old)
	r.settle()
	return primary
}

// switchTo waits until the sentinels agree on a primary other than old
// and at least half the load's connections are on it, and returns it.
func (r *run) switchTo(old *node) *node {
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
	return primary
}

// bothLost kills the primary old and its replica with the larger
// acknowledged offset (newestReplica) at once, waits until the other is
// promoted and the clients moved, brings the killed replica back, empty,
// as its replica, and lets the load run on (settle).
func (r *run) bothLost(old *node) {
	r.t.Helper()
	lost, offsets := r.cl.newestReplica(old)
	old.p.Kill()
	lost.p.Kill()
	primary := r.switchTo(old)
	back := time.Now()
	r.cl.restart(lost, primary)
	r.note = fmt.Sprintf("killed %s and %s (acknowledged offsets %s); %s back as a replica of %s %v after the clients moved",
		old.name, lost.name, offsets, lost.name, primary.name, time.Since(back).Round(time.Millisecond))
	r.settle()
}

// settle lets the load run 1.5 s more (past the window in which the
// clients moved), or a whole window of the limit if longer: a new
// primary that forgot admissions admits them again within the window
// (CL.FIXED), or by the time its slack is used up (CL.THROTTLE: the
// forgotten admissions at the rate, up to a period).
func (r *run) settle() {
	r.t.Helper()
	d := max(1500*time.Millisecond, r.lim.window())
	since := time.Now()
	testwait.Until(r.t, d+15*time.Second, fmt.Sprintf("%v of load on the new primary", d), func() bool {
		return time.Since(since) >= d
	})
}

// result is one run's figures with what identifies it.
type result struct {
	scenario, mode, command, window string
	n                               int
	f                               figures
	switched, moved                 time.Duration
}

// pick returns the items of all named in the comma list of the
// environment variable env (def if unset), in the list's order.
func pick[T any](t *testing.T, env, def string, all []T, name func(T) string) []T {
	t.Helper()
	names := os.Getenv(env)
	if names == "" {
		names = def
	}
	var out []T
	for _, n := range strings.Split(names, ",") {
		i := slices.IndexFunc(all, func(x T) bool { return name(x) == n })
		if i < 0 {
			t.Fatalf("%s: no %q", env, n)
		}
		out = append(out, all[i])
	}
	return out
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
	runModes := pick(t, "CELLSERVER_PARTITION_MODES", defaultModes, modes, func(m mode) string { return m.name })
	runFaults := pick(t, "CELLSERVER_PARTITION_FAULTS", defaultFaults, scenarios, func(s scenario) string { return s.name })
	runWindows := pick(t, "CELLSERVER_PARTITION_WINDOWS", defaultWindows, windowSets, func(w windowSet) string { return w.name })
	var results []result
	t.Cleanup(func() { fmt.Print(markdown(results, runs > 1)) })
	for _, sc := range runFaults {
		t.Run(sc.name, func(t *testing.T) {
			for _, md := range runModes {
				t.Run(md.name, func(t *testing.T) {
					if md.flag != "" {
						harness.NeedFlag(t, md.flag)
					}
					for _, ws := range runWindows {
						for _, lim := range ws.limits {
							name := lim.name()
							if ws.name != defaultWindows {
								name += "_" + ws.name
							}
							t.Run(name, func(t *testing.T) {
								for i := 1; i <= runs; i++ {
									res := result{scenario: sc.name, mode: md.name, command: lim.name(), window: ws.name, n: i}
									t.Run(fmt.Sprintf("run%d", i), func(t *testing.T) {
										res.f, res.switched, res.moved = runOne(t, sc, md, lim)
										if t.Failed() {
											return
										}
										results = append(results, res)
										if (md.zero && !sc.mayLose) || sc.name == "none" || strict {
											if res.f.totalOver != 0 {
												t.Errorf("%s/%s/%s: over-admission %d in total, %d at most per key-window; must be 0\n%s",
													sc.name, md.name, name, res.f.totalOver, res.f.maxOver, res.f.worst)
											}
										}
										if sc.name == "none" && res.f.failed != res.f.errs[md.idleErr] {
											t.Errorf("no fault, yet %s client errors", res.f.errSummary())
										}
									})
								}
							})
						}
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
		// Pipelines (mode wait) on the same pool as single commands: the
		// load's connections are the pool's.
		PipelinePoolSize: -1,
		MaxRetries:       -1, // every attempt is recorded as it went
	})
	defer fc.Close()
	l := startLoad(fc, lim, md.wait)
	t.Cleanup(l.cancel) // a failed wait must not leave the workers running
	// The warm-up: every key admitted, and the limit's own condition
	// (its burst used up, the phase of a window), which takes up to two
	// windows.
	testwait.Until(t, 20*time.Second+2*lim.window(), "1.5 s of load with an admission on every key, and the limit ready", func() bool {
		return time.Since(l.start) >= 1500*time.Millisecond && l.allKeysAdmitted() && lim.ready(l, time.Now())
	})
	r := &run{t: t, cl: cl, lim: lim, load: l, faultAt: time.Now()}
	sc.inject(r)
	replies, end := l.stop(t)
	f := analyze(lim, replies, end)
	t.Logf("%s/%s/%s/%v: setup %v, load %v (fault after %v); %d requests, %d admitted, %d refused, errors %s; over-admission max %d per key-window, %d in total (%d admissions of ambiguous window, %d placed with the clock slack); longest without admission %v on a key, %v on all; sentinels switched %v after the fault, clients moved %v. %s",
		sc.name, md.name, lim.name(), lim.window(), setup.Round(time.Millisecond), end.Sub(l.start).Round(time.Millisecond), r.faultAt.Sub(l.start).Round(time.Millisecond),
		f.requests, f.admitted, f.refused, f.errSummary(), f.maxOver, f.totalOver, f.ambiguous, f.skewed,
		f.maxGapKey.Round(time.Millisecond), f.maxGap.Round(time.Millisecond),
		r.switched.Round(time.Millisecond), r.moved.Round(time.Millisecond), r.note)
	if f.worst != "" && os.Getenv("CELLSERVER_PARTITION_LOGS") != "" {
		t.Logf("worst over-admission:\n%s", f.worst)
	}
	return f, r.switched, r.moved
}

// markdown renders the results as a table, and with summary a table of
// the ranges (min-max) over the runs of each scenario, mode, command and
// window, and the failure contract: per window and command, a table of
// modes by faults.
func markdown(rs []result, summary bool) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| scenario | mode | command | window | run | requests | admitted | errors | max over per key-window | total over | longest no-admission (key / all) | sentinels switched / clients moved |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %d | %d | %s | %d | %d | %v / %v | %s |\n",
			r.scenario, r.mode, r.command, r.window, r.n, r.f.requests, r.f.admitted, r.f.errSummary(),
			r.f.maxOver, r.f.totalOver, r.f.maxGapKey.Round(time.Millisecond), r.f.maxGap.Round(time.Millisecond), switchCell(r.switched, r.moved))
	}
	if !summary {
		return b.String()
	}
	b.WriteString("\n| scenario | mode | command | window | runs | max over per key-window | total over | longest no-admission on a key | on all keys | client errors | sentinels switched | clients moved |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	type group struct{ scenario, mode, command, window string }
	var order []group
	by := map[group][]result{}
	for _, r := range rs {
		g := group{r.scenario, r.mode, r.command, r.window}
		if by[g] == nil {
			order = append(order, g)
		}
		by[g] = append(by[g], r)
	}
	for _, g := range order {
		gs := by[g]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", g.scenario, g.mode, g.command, g.window, len(gs),
			span(gs, func(r result) float64 { return float64(r.f.maxOver) }, "%.0f", ""),
			span(gs, func(r result) float64 { return float64(r.f.totalOver) }, "%.0f", ""),
			span(gs, func(r result) float64 { return r.f.maxGapKey.Seconds() }, "%.2f s", ""),
			span(gs, func(r result) float64 { return r.f.maxGap.Seconds() }, "%.2f s", ""),
			span(gs, func(r result) float64 { return float64(r.f.failed) }, "%.0f", ""),
			span(gs, func(r result) float64 { return r.switched.Seconds() }, "%.2f s", "-"),
			span(gs, func(r result) float64 { return r.moved.Seconds() }, "%.2f s", "-"))
	}
	// The contract: modes by faults, per window and command; a cell is
	// "max per key-window / total; longest time without any admission".
	var windows, commands, scs, mds []string
	for _, g := range order {
		windows = appendNew(windows, g.window)
		commands = appendNew(commands, g.command)
		scs = appendNew(scs, g.scenario)
		mds = appendNew(mds, g.mode)
	}
	for _, w := range windows {
		for _, c := range commands {
			fmt.Fprintf(&b, "\n%s, %s windows: over-admission max per key-window / total; longest time without an admission (all keys)\n\n| mode |", c, w)
			for _, sc := range scs {
				fmt.Fprintf(&b, " %s |", sc)
			}
			b.WriteString("\n|---|" + strings.Repeat("---|", len(scs)) + "\n")
			for _, md := range mds {
				fmt.Fprintf(&b, "| %s |", md)
				for _, sc := range scs {
					gs := by[group{sc, md, c, w}]
					if len(gs) == 0 {
						b.WriteString("  |")
						continue
					}
					fmt.Fprintf(&b, " %s / %s; %s |",
						span(gs, func(r result) float64 { return float64(r.f.maxOver) }, "%.0f", ""),
						span(gs, func(r result) float64 { return float64(r.f.totalOver) }, "%.0f", ""),
						span(gs, func(r result) float64 { return r.f.maxGap.Seconds() }, "%.1f s", ""))
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// appendNew appends s to list unless it is there already.
func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
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
