// Package redistcl runs Redis 7.0.15's own TCL test units (vendored,
// unmodified, in redis-7.0.15/) against the real cellserver binary and
// compares the outcome with expected.txt, the list of every test that
// does not pass, grouped by reason.
//
// # How a unit runs
//
// The Redis framework is a test server driving test clients over a small
// socket protocol (test_helper.tcl: a length line, then a Tcl list
// "status data elapsed"). Here this test is the test server: for each unit
// it starts a fresh cellserver and one `tclsh tests/test_helper.tcl
// --client PORT --host 127.0.0.1 --port P --durable` (external-server
// mode: the framework spawns no redis-server; blocks tagged external:skip
// are reported as ignored), and sends it one "run_code" request: shim.tcl
// followed by `source tests/unit/NAME.tcl`. The client reports each test
// as ok, err, skip or ignore; --durable turns an unexpected error inside a
// test into err instead of ending the unit.
//
// # Bounds
//
// A test that sends no report for 20 s is counted as hung: the client's
// whole process group is killed and the unit starts again with that test
// (and the tests already reported) skipped. A unit has 90 s in all
// (unitBounds).
//
// # The list
//
// expected.txt holds one line per test that does not pass, under a
// "reason: ..." line. The test fails on a non-passing test the list does
// not have and on a listed test that now passes. With -update it rewrites
// the list instead (keeping the reasons of entries still there, adding new
// ones under "reason: TODO"); a TODO reason fails the test until a person
// writes the reason.
//
// tclsh comes with Debian's tcl package (scripts/ensure-tools.sh installs
// it). Without it the test skips, unless the environment variable CI is
// set: then it fails.
package redistcl

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
)

var update = flag.Bool("update", false, "rewrite expected.txt from this run (new entries get \"reason: TODO\")")

const (
	vendorDir    = "redis-7.0.15"
	expectedFile = "expected.txt"
	shimFile     = "shim.tcl"

	// maxRestarts bounds the restarts of one unit after hung tests.
	maxRestarts = 4
)

// bounds are a unit run's time limits.
type bounds struct {
	// idle bounds the time between two reports of a unit's client
	// (roughly, one test).
	idle time.Duration
	// unit bounds one unit, restarts after a hung test included.
	unit time.Duration
}

// unitBounds are the limits of the vendored units. Their slowest test
// waits 15 s on purpose (dump's MIGRATE cached connections); a test
// waiting 20 s is stuck.
var unitBounds = bounds{idle: 20 * time.Second, unit: 90 * time.Second}

// externalSkipRun are the units whose blocks tagged external:skip run
// anyway (shim.tcl): the ACL and AUTH units tag every block so, because
// some of their blocks start a server with options of their own, which an
// external server gets as CONFIG SET instead (cellserver refuses most:
// those blocks are listed with that reason); the others test the commands
// on the server as it is, as they would on Redis.
var externalSkipRun = map[string]bool{"acl": true, "auth": true}

// units are the vendored units this test runs, in order, by their path
// under tests/unit without ".tcl" (the subtest's name). A unit that only
// spawns servers of its own (every block tagged external:skip) still runs:
// its blocks are then listed as ignored, so the list says they were not run.
var units = []string{
	"type/incr",
	"type/string",
	"type/stream-cgroups",
	"type/stream",
	"expire",
	"keyspace",
	"acl",
	"auth",
	"introspection",
	"introspection-2",
	"shutdown",
	"info-command",
	"pubsub",
	"multi",
	"tracking",
	"quit",
	"protocol",
	"scan",
	"dump",
	"slowlog",
	"latency-monitor",
	"other",
	"querybuf",
}

func TestMain(m *testing.M) { binproc.Main(m) }

// Outcomes of a test that does not pass, as written in expected.txt.
const (
	statusFailed  = "failed"  // the test ran and failed (err)
	statusError   = "error"   // a block's code outside any test failed; the name is the message's first line
	statusIgnored = "ignored" // not run: a tag the framework skips in external mode
	statusHung    = "hung"    // no report within bounds.idle; the unit went on without it
	statusAborted = "aborted" // the client died (an exception); the rest of the unit did not run
)

// entry is one test that did not pass.
type entry struct {
	unit, status, name string
}

// outcome is an entry as observed, with the error that made it.
type outcome struct {
	entry
	why string // the error's message, first line ("" if none)
}

func (e entry) String() string { return e.unit + " " + e.status + ": " + e.name }

// counts sums one unit's reports.
type counts struct {
	ok, failed, errors, skipped, ignored, hung, aborted int
}

func (c counts) String() string {
	return fmt.Sprintf("%d ok, %d failed, %d block errors, %d ignored, %d skipped, %d hung, %d aborted",
		c.ok, c.failed, c.errors, c.ignored, c.skipped, c.hung, c.aborted)
}

func TestRedisTCL(t *testing.T) {
	tclsh, err := exec.LookPath("tclsh")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tclsh not found and CI is set: install Debian's tcl package (scripts/ensure-tools.sh does): %v", err)
		}
		t.Skip("tclsh not installed (Debian package tcl; scripts/ensure-tools.sh installs it); skipping. With CI set this fails instead.")
	}
	exp, err := readExpected(expectedFile)
	if err != nil {
		t.Fatal(err)
	}
	shim, err := os.ReadFile(shimFile)
	if err != nil {
		t.Fatal(err)
	}
	binproc.Binary(t)

	var mu sync.Mutex // guards got, ran
	got := map[string][]outcome{}
	var ran []string
	for _, unit := range units {
		t.Run(unit, func(t *testing.T) {
			start := time.Now()
			entries, c := runUnit(t, tclsh, unit, string(shim), vendorDir, unitBounds)
			t.Logf("%s: %v (%.1f s)", unit, c, time.Since(start).Seconds())
			mu.Lock()
			got[unit] = entries
			ran = append(ran, unit)
			mu.Unlock()
			if !*update {
				want, maybe := exp.byUnit(unit)
				compare(t, unit, want, maybe, entries)
			}
		})
	}
	if *update {
		n, todo := exp.update(ran, got)
		for _, o := range todo {
			t.Logf("reason: TODO: %s\n\t(%s)", o.entry, o.why)
		}
		if err := os.WriteFile(expectedFile, []byte(exp.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d entries, %d of them new", expectedFile, exp.len(), n)
	}
	if todo := exp.todo(); todo > 0 {
		t.Errorf("%s has %d entries under \"reason: TODO\": write their reason", expectedFile, todo)
	}
}

// compare fails t for every difference between the expected (want, and
// maybe: entries that may or may not happen) and the observed non-passing
// tests of a unit (as multisets: Redis repeats some test names).
func compare(t *testing.T, unit string, want, maybe []entry, have []outcome) {
	t.Helper()
	left, optional := map[entry]int{}, map[entry]int{}
	for _, e := range want {
		left[e]++
	}
	for _, e := range maybe {
		optional[e]++
	}
	for _, o := range have {
		if left[o.entry] > 0 {
			left[o.entry]--
			continue
		}
		if optional[o.entry] > 0 {
			optional[o.entry]--
			continue
		}
		if o.why != "" {
			t.Errorf("does not pass and is not in %s: %s\n\t(%s)", expectedFile, o.entry, o.why)
		} else {
			t.Errorf("does not pass and is not in %s: %s", expectedFile, o.entry)
		}
	}
	for _, e := range want {
		if left[e] > 0 {
			left[e]--
			t.Errorf("in %s but did not happen this way (passes now? then remove the line): %s", expectedFile, e)
		}
	}
}

// runUnit runs one unit of the Redis tree in src (copied first, as the
// framework writes under tests/tmp), restarting it after a hung test, and
// returns its non-passing tests in report order.
func runUnit(t *testing.T, tclsh, unit, shim, src string, b bounds) ([]outcome, counts) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	// A data directory, as a Redis under test always has one (SAVE,
	// BGSAVE and LASTSAVE write checkpoints there).
	_, addr := binproc.StartServer(t, "--data-dir", filepath.Join(t.TempDir(), "data"))
	_, port, _ := net.SplitHostPort(addr)

	deadline := time.Now().Add(b.unit)
	var all []outcome
	var total counts
	var skip []string // tests not to run again after a restart
	for attempt := 0; ; attempt++ {
		r := &unitRun{unit: unit, idle: b.idle}
		err := r.run(tclsh, dir, port, shim, skip, deadline)
		all = append(all, r.entries...)
		total.add(r.counts)
		if r.counts.aborted > 0 {
			t.Logf("%s: the test client died:\n%s", unit, r.output.String())
		}
		if err == nil {
			return all, total
		}
		var hung errHung
		if !errors.As(err, &hung) {
			t.Fatalf("%s: %v\nclient output:\n%s", unit, err, r.output.String())
		}
		if hung.test == "" || attempt == maxRestarts || time.Now().After(deadline) {
			t.Logf("%s: %v; not restarting the unit", unit, err)
			return all, total
		}
		t.Logf("%s: %v; restarting the unit without it", unit, err)
		skip = append(skip, r.reported...)
		skip = append(skip, hung.test)
	}
}

func (c *counts) add(d counts) {
	c.ok += d.ok
	c.failed += d.failed
	c.errors += d.errors
	c.skipped += d.skipped
	c.ignored += d.ignored
	c.hung += d.hung
	c.aborted += d.aborted
}

// errHung says that the client sent nothing for idle.
type errHung struct {
	test string
	idle time.Duration
}

func (e errHung) Error() string {
	if e.test == "" {
		return fmt.Sprintf("no report for %v outside any test", e.idle)
	}
	return fmt.Sprintf("no report for %v in test %q", e.idle, e.test)
}

// unitRun is one run of one unit's client.
type unitRun struct {
	unit     string
	idle     time.Duration // bounds.idle
	entries  []outcome
	counts   counts
	reported []string     // names of the tests reported (for a restart's skip list)
	output   binproc.Logs // the client's stdout and stderr
}

// run starts the client, sends it the unit and reads its reports until
// "done" (nil), a hang (errHung) or another failure.
func (r *unitRun) run(tclsh, dir, port, shim string, skip []string, deadline time.Time) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	_, lport, _ := net.SplitHostPort(ln.Addr().String())
	args := []string{"tests/test_helper.tcl", "--client", lport, "--host", "127.0.0.1", "--port", port, "--durable"}
	for _, s := range skip {
		args = append(args, "--skiptest", s)
	}
	cmd := exec.Command(tclsh, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // killed as a group: tests may start processes
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	copied := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			r.output.Add(sc.Text())
		}
		io.Copy(io.Discard, out)
		close(copied)
	}()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-copied
		_ = cmd.Wait()
	}()

	ln.(*net.TCPListener).SetDeadline(time.Now().Add(r.idle))
	conn, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("the client did not connect: %v", err)
	}
	defer conn.Close()
	// The request: [list run_code [list NAME FILE CODE]]. The shim and the
	// source line are brace-balanced, so braces quote them.
	file := "tests/unit/" + r.unit + ".tcl"
	code := shim + "\n"
	if externalSkipRun[r.unit] {
		code += "set ::redistcl_run_external_skip 1\n"
	}
	code += "source " + file + "\n"
	payload := "run_code {{unit/" + r.unit + "} {" + file + "} {" + code + "}}"
	if _, err := fmt.Fprintf(conn, "%d\n%s", len(payload), payload); err != nil {
		return err
	}

	br := bufio.NewReader(conn)
	current := "" // the test in progress ("testing" seen, no outcome yet)
	for {
		d := time.Now().Add(r.idle)
		if d.After(deadline) {
			d = deadline
		}
		conn.SetReadDeadline(d)
		status, data, err := readPacket(br)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				r.add(statusHung, current, "")
				r.counts.hung++
				return errHung{current, r.idle}
			}
			if errors.Is(err, io.EOF) {
				// The client exited without "done": an exception already
				// reported, or a crash.
				if r.counts.aborted == 0 {
					r.add(statusAborted, nameOr(current, "exited"), "")
					r.counts.aborted++
				}
				return nil
			}
			return err
		}
		switch status {
		case "testing":
			current = data
		case "ok":
			r.counts.ok++
			r.reported = append(r.reported, data)
			current = ""
		case "err":
			if current != "" {
				r.add(statusFailed, current, data)
				r.reported = append(r.reported, current)
				r.counts.failed++
			} else {
				r.add(statusError, blockError(data), data)
				r.counts.errors++
			}
			current = ""
		case "skip":
			r.counts.skipped++
		case "ignore":
			why := ""
			if strings.HasSuffix(data, externalSkipMsg) {
				why = externalSkip
			}
			r.outcome(statusIgnored, data, why)
			r.counts.ignored++
		case "exception":
			// Outside a test, the message names the cause.
			why := strings.TrimSuffix(strings.TrimPrefix(firstLine(data), "Executing test client: "), ".")
			r.add(statusAborted, nameOr(current, why), data)
			r.counts.aborted++
			r.output.Add("exception: " + data)
		case "done":
			return nil
		}
	}
}

// add records a test that did not pass; report is what the client said
// about it, if anything.
func (r *unitRun) add(status, name, report string) {
	r.outcome(status, name, cause(report))
}

func (r *unitRun) outcome(status, name, why string) {
	r.entries = append(r.entries, outcome{entry{r.unit, status, name}, why})
}

// The framework's word for a test or block tagged external:skip (one that
// starts a redis-server of its own, with its own config), and the cause
// and reason of such an entry.
const (
	externalSkipMsg    = "Not supported on external server"
	externalSkip       = "external:skip"
	externalSkipReason = "not run: starts a redis-server of its own (tagged external:skip)"
)

// Redis error texts that say what a test needs (cause).
var (
	unknownCommandRE = regexp.MustCompile(`unknown command '([^']*)'`)
	unknownSubRE     = regexp.MustCompile(`unknown subcommand '([^']*)'. Try ([A-Za-z.]+) HELP`)
	configSetRE      = regexp.MustCompile(`(?:for CONFIG SET - '|related to argument ')([^']*)'`)
)

// cause returns, from a client's report of a failure, the first Redis
// error saying that something is not implemented, as "X" for "needs X";
// else the report's first error-looking line; "" if none.
func cause(report string) string {
	type hit struct {
		at   int
		what string
	}
	var hits []hit
	if m := unknownCommandRE.FindStringSubmatchIndex(report); m != nil {
		hits = append(hits, hit{m[0], strings.ToUpper(report[m[2]:m[3]])})
	}
	if m := unknownSubRE.FindStringSubmatchIndex(report); m != nil {
		hits = append(hits, hit{m[0], strings.ToUpper(report[m[4]:m[5]] + " " + report[m[2]:m[3]])})
	}
	if m := configSetRE.FindStringSubmatchIndex(report); m != nil {
		hits = append(hits, hit{m[0], "CONFIG SET " + report[m[2]:m[3]]})
	}
	if len(hits) > 0 {
		slices.SortFunc(hits, func(a, b hit) int { return a.at - b.at })
		return needsPrefix + hits[0].what
	}
	// An error that is not an assertion: the framework cuts the first ten
	// characters of its message (meant for "assertion:"), then appends
	// Tcl's stack trace, which starts with the whole message.
	if before, _, ok := strings.Cut(report, "\n    while executing\n"); ok {
		return strings.TrimSpace(before[strings.LastIndex(before, "\n")+1:])
	}
	for _, line := range strings.Split(report, "\n")[1:] {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// needsPrefix marks a cause derived from an error text (cause); -update
// files such an entry under the reason autoReason(cause).
const needsPrefix = "needs "

// autoReason is the reason -update gives an entry whose cause says what is
// missing: "needs X (not in cellserver)", or that it was not run
// (externalSkipReason). Entries under such a reason are
// filed again at each -update (their cause may change as commands land);
// entries under any other reason stay where a person put them.
func autoReason(why string) (string, bool) {
	if why == externalSkip {
		return externalSkipReason, true
	}
	if !strings.HasPrefix(why, needsPrefix) {
		return "", false
	}
	return why + " (not in cellserver)", true
}

func isAutoReason(reason string) bool {
	return reason == externalSkipReason ||
		strings.HasPrefix(reason, needsPrefix) && strings.HasSuffix(reason, " (not in cellserver)")
}

// nameOr returns test, or if empty (no test in progress) why.
func nameOr(test, why string) string {
	if test == "" {
		return why
	}
	return test
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

// blockError names a block's error by the error's message: the first line
// of the Tcl stack trace that follows the framework's (cut) message.
func blockError(data string) string {
	lines := strings.SplitN(data, "\n", 3)
	if len(lines) > 1 {
		return strings.TrimSpace(lines[1])
	}
	return strings.TrimSpace(lines[0])
}

// readPacket reads one report: a decimal length line, then that many
// characters of a Tcl list "status data elapsed".
func readPacket(br *bufio.Reader) (status, data string, err error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || n < 0 || n > 16<<20 {
		return "", "", fmt.Errorf("bad packet length %q", line)
	}
	// The client's socket translates "\n" to "\r\n" (Tcl's default for
	// sockets) after counting: read n characters as Tcl's "auto" input
	// translation does, a "\r\n" or a lone "\r" being one "\n".
	buf := make([]byte, 0, n)
	for len(buf) < n {
		c, err := br.ReadByte()
		if err != nil {
			return "", "", err
		}
		if c == '\r' {
			if next, err := br.Peek(1); err == nil && next[0] == '\n' {
				br.ReadByte()
			}
			c = '\n'
		}
		buf = append(buf, c)
	}
	elems, err := splitList(string(buf))
	if err != nil || len(elems) < 2 {
		return "", "", fmt.Errorf("bad packet %q: %v", buf, err)
	}
	return elems[0], elems[1], nil
}

// expected is expected.txt: groups of entries under a reason, in file order.
type expected struct {
	header []string // the comment lines before the first group
	groups []group
}

type group struct {
	reason  string
	entries []entry
}

const todoReason = "TODO"

// readExpected parses the list. Lines: "# ..." comments (kept only before
// the first group), "reason: TEXT" starting a group, "UNIT STATUS: NAME"
// entries, blank lines.
func readExpected(path string) (*expected, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	e := &expected{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "#"):
			if len(e.groups) == 0 {
				e.header = append(e.header, line)
			}
		case strings.HasPrefix(line, "reason:"):
			e.groups = append(e.groups, group{reason: strings.TrimSpace(strings.TrimPrefix(line, "reason:"))})
		default:
			unit, rest, ok1 := strings.Cut(line, " ")
			status, name, ok2 := strings.Cut(rest, ": ")
			if !ok1 || !ok2 || !slices.Contains(units, unit) || !validStatus(status) {
				return nil, fmt.Errorf("%s:%d: want \"UNIT STATUS: NAME\" with a unit of this test and a status of %v, have %q",
					path, i+1, []string{statusFailed, statusError, statusIgnored, statusHung, statusAborted}, line)
			}
			if len(e.groups) == 0 {
				return nil, fmt.Errorf("%s:%d: an entry before any \"reason:\" line", path, i+1)
			}
			g := &e.groups[len(e.groups)-1]
			g.entries = append(g.entries, entry{unit, status, name})
		}
	}
	return e, nil
}

func validStatus(s string) bool {
	switch s {
	case statusFailed, statusError, statusIgnored, statusHung, statusAborted:
		return true
	}
	return false
}

// byUnit returns the entries of unit: those that must happen, and those
// under a flaky reason, which may.
func (e *expected) byUnit(unit string) (want, maybe []entry) {
	for _, g := range e.groups {
		for _, en := range g.entries {
			switch {
			case en.unit != unit:
			case isFlakyReason(g.reason):
				maybe = append(maybe, en)
			default:
				want = append(want, en)
			}
		}
	}
	return want, maybe
}

// flakyPrefix starts the reason of tests that pass or fail from one run to
// the next (timing); their entries may or may not happen, and -update
// keeps them.
const flakyPrefix = "flaky:"

func isFlakyReason(reason string) bool { return strings.HasPrefix(reason, flakyPrefix) }

func (e *expected) len() int {
	n := 0
	for _, g := range e.groups {
		n += len(g.entries)
	}
	return n
}

func (e *expected) todo() int {
	n := 0
	for _, g := range e.groups {
		if g.reason == todoReason {
			n += len(g.entries)
		}
	}
	return n
}

// update replaces the entries of the units that ran with got. Under a
// reason a person wrote, an entry still observed keeps its place and one no
// longer observed goes (unless the reason says flaky: then it stays). Every other observed entry is filed under
// autoReason of its cause when that says what is missing, else under
// "reason: TODO" (entries already under such a reason or under TODO are
// filed again: their cause may have changed). Groups left empty go. It returns the number of
// entries that were not in the list before and the entries filed under
// TODO, with their causes.
func (e *expected) update(ran []string, got map[string][]outcome) (added int, todo []outcome) {
	left := map[entry]int{}
	for _, u := range ran {
		for _, o := range got[u] {
			left[o.entry]++
		}
	}
	before := map[entry]int{}
	var groups []group
	for _, g := range e.groups {
		var keep []entry
		for _, en := range g.entries {
			switch {
			case !slices.Contains(ran, en.unit):
				keep = append(keep, en)
			case isFlakyReason(g.reason):
				keep = append(keep, en)
				if left[en] > 0 {
					left[en]--
				}
			case isAutoReason(g.reason) || g.reason == todoReason:
				before[en]++
			case left[en] > 0:
				left[en]--
				keep = append(keep, en)
			}
		}
		g.entries = keep
		groups = append(groups, g)
	}
	for _, u := range units {
		for _, o := range got[u] {
			if left[o.entry] == 0 {
				continue
			}
			left[o.entry]--
			if before[o.entry] > 0 {
				before[o.entry]--
			} else {
				added++
			}
			reason, ok := autoReason(o.why)
			if !ok {
				reason = todoReason
				todo = append(todo, o)
			}
			i := slices.IndexFunc(groups, func(g group) bool { return g.reason == reason })
			if i < 0 {
				groups = append(groups, group{reason: reason})
				i = len(groups) - 1
			}
			groups[i].entries = append(groups[i].entries, o.entry)
		}
	}
	e.groups = slices.DeleteFunc(groups, func(g group) bool { return len(g.entries) == 0 })
	// TODO last, where the eye looks for it.
	slices.SortStableFunc(e.groups, func(a, b group) int {
		return boolInt(a.reason == todoReason) - boolInt(b.reason == todoReason)
	})
	return added, todo
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (e *expected) String() string {
	var b strings.Builder
	for _, h := range e.header {
		b.WriteString(h + "\n")
	}
	for _, g := range e.groups {
		b.WriteString("\nreason: " + g.reason + "\n")
		for _, en := range g.entries {
			b.WriteString(en.String() + "\n")
		}
	}
	return b.String()
}
