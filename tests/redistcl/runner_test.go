package redistcl

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
)

// TestRunnerOutcomes runs testdata/selftest.tcl, a unit that ends its
// tests in every way the runner tells apart, with a short idle bound: a
// pass, an assertion, an unknown command, a hang (killed, and the unit
// restarted without it), tags, a block's error and an exception.
func TestRunnerOutcomes(t *testing.T) {
	tclsh, err := exec.LookPath("tclsh")
	if err != nil {
		t.Skip("tclsh not installed")
	}
	shim, err := os.ReadFile(shimFile)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(vendorDir)); err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile("testdata/selftest.tcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "tests/unit/selftest.tcl"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	binproc.Binary(t) // built before the clock starts
	start := time.Now()
	got, c := runUnit(t, tclsh, "selftest", string(shim), src, bounds{idle: 2 * time.Second, unit: 30 * time.Second})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: the hang was not cut at the idle bound", d)
	}
	want := []outcome{
		{entry{"selftest", statusFailed, "fails"}, "Expected '1' to be equal to '2' (context: type eval line 2 cmd {assert_equal 1 2} proc ::redistcl_framework_test)"},
		{entry{"selftest", statusFailed, "fails on an unknown command"}, "needs NOSUCHCOMMAND"},
		{entry{"selftest", statusHung, "hangs"}, ""},
		{entry{"selftest", statusIgnored, "skipped by a tag: Not supported on external server"}, externalSkip},
		{entry{"selftest", statusIgnored, "Not supported on external server"}, externalSkip},
		{entry{"selftest", statusError, "ERR unknown command 'nosuchcommand2', with args beginning with:"}, "needs NOSUCHCOMMAND2"},
		{entry{"selftest", statusAborted, "boom outside any test"}, "boom outside any test"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes:\n%s\nwant:\n%s", dump(got), dump(want))
	}
	// The restart skips the 4 tests reported or hung before it.
	if want := (counts{ok: 2, failed: 2, errors: 1, skipped: 4, ignored: 2, hung: 1, aborted: 1}); c != want {
		t.Errorf("counts %v, want %v", c, want)
	}
}

func dump(os []outcome) string {
	var b strings.Builder
	for _, o := range os {
		b.WriteString("\t" + o.entry.String() + " (" + o.why + ")\n")
	}
	return b.String()
}

// TestUpdate checks how -update files entries: kept under a person's
// reason, refiled under automatic reasons and TODO, kept under flaky:, and
// the units that did not run left alone.
func TestUpdate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "expected.txt")
	const before = `# header

reason: a person's reason
expire failed: still failing
expire failed: passes now
keyspace failed: keyspace did not run

reason: needs INCR (not in cellserver)
expire failed: was INCR, now SET

reason: flaky: timing
expire failed: flaky, passed this time

reason: TODO
expire failed: was TODO, now known
`
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := readExpected(path)
	if err != nil {
		t.Fatal(err)
	}
	o := func(name, why string) outcome { return outcome{entry{"expire", statusFailed, name}, why} }
	added, todo := e.update([]string{"expire"}, map[string][]outcome{"expire": {
		o("still failing", "Expected 1"),
		o("was INCR, now SET", "needs SET"),
		o("was TODO, now known", "needs GETEX"),
		o("new and unknown", "Expected 2"),
		o("new, needs INCR", "needs INCR"),
	}})
	const after = `# header

reason: a person's reason
expire failed: still failing
keyspace failed: keyspace did not run

reason: needs INCR (not in cellserver)
expire failed: new, needs INCR

reason: flaky: timing
expire failed: flaky, passed this time

reason: needs SET (not in cellserver)
expire failed: was INCR, now SET

reason: needs GETEX (not in cellserver)
expire failed: was TODO, now known

reason: TODO
expire failed: new and unknown
`
	if got := e.String(); got != after {
		t.Errorf("after update:\n%s\nwant:\n%s", got, after)
	}
	if added != 2 || len(todo) != 1 || todo[0].name != "new and unknown" {
		t.Errorf("added %d, todo %v; want 2 and [new and unknown]", added, todo)
	}
	if n := e.todo(); n != 1 {
		t.Errorf("todo() = %d, want 1", n)
	}
}

func TestSplitList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`ok {a test name} 12`, []string{"ok", "a test name", "12"}},
		{`err name\ in\ file\nExpected\ '\{'\ x 0`, []string{"err", "name in file\nExpected '{' x", "0"}},
		{`err a\ \{b\}\n "q \"x\"" {}`, []string{"err", "a {b}\n", `q "x"`, ""}},
		{`testing {nested {braces} here} 0`, []string{"testing", "nested {braces} here", "0"}},
	} {
		got, err := splitList(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("splitList(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := splitList(`ok {unbalanced`); err == nil {
		t.Error("unbalanced brace accepted")
	}
}
