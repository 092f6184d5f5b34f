package hostile

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
)

// attack is one case in progress: a fresh server, the well-behaved
// client's key set, the probe running, the RSS before the attack.
type attack struct {
	t     *testing.T
	p     *proc
	addr  string
	probe *probe
	keep  keepState
	base  int64
	name  string
	flags string
	start time.Time
}

// begin starts a server with args, stores the keep key, starts the probe
// and reads the base RSS.
func begin(t *testing.T, name string, allowOOM bool, args ...string) *attack {
	t.Helper()
	p := startServer(t, args...)
	a := &attack{t: t, p: p, addr: p.addr, name: name, flags: strings.Join(args, " "), start: time.Now()}
	if a.flags == "" {
		a.flags = "(defaults)"
	}
	a.keep = setKeep(t, p.addr)
	a.probe = startProbe(t, p.addr, allowOOM)
	a.base = p.rss()
	return a
}

// end stops the probe (failing on any failed call), checks that the server
// is alive and the keep key reads the same (or, with keepMayGo, notes that
// it was evicted), compares the peak RSS with bound, records the table
// row and stops the server with SIGTERM (it must exit 0).
func (a *attack) end(bound int64, why string, keepMayGo bool, note string) {
	t := a.t
	t.Helper()
	ps := a.probe.finish(t)
	a.p.requireAlive(t)
	if err := checkKeep(a.addr, a.keep); err != nil {
		if !keepMayGo {
			t.Errorf("well-behaved client's state lost: %v", err)
		} else {
			note += "; keep key evicted (expected under allkeys-lru)"
		}
	} else if keepMayGo {
		note += "; keep key survived"
	}
	hwm := a.p.hwm()
	r := row{name: a.name, flags: a.flags, bound: bound, boundWhy: why, base: a.base, maxRSS: hwm, probe: ps, note: note}
	addRow(r)
	t.Logf("%s: base RSS %s, max RSS %s (bound %s = %s); probe %d calls p50 %s p99 %s max %s; %s",
		a.name, mb(a.base), mb(hwm), mb(bound), why, ps.calls, ms(ps.p50), ms(ps.p99), ms(ps.max), note)
	if hwm > bound {
		t.Errorf("%s: peak RSS %s over the bound %s (%s)", a.name, mb(hwm), mb(bound), why)
	}
	a.p.stop(t)
}

// TestHostile runs every hostile-input case in turn against a fresh real
// binary, then logs the table (Markdown) of RSS bounds and probe
// latencies. Set HOSTILE_REPORT=file to also write the table to a file.
//
// The server binary is built without the race detector in every mode, so
// its RSS is the product's whatever the test binary is: the RSS-heavy
// cases keep their meaning, and their sizes, under -race (only the test's
// own clients run slower), so none of them is skipped. raceEnabled (a
// build-tagged const) names the mode in the table's heading.
func TestHostile(t *testing.T) {
	binproc.Binary(t)
	cases := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"bulk", caseBulk},
		{"array", caseArray},
		{"garbage", caseGarbage},
		{"halfopen_timeout", caseHalfOpenTimeout},
		{"halfopen_idle", caseHalfOpenIdle},
		{"nonreading", caseNonReading},
		{"connections", caseConnections},
		{"maxclients", caseMaxClients},
		{"spray_lru", caseSprayLRU},
		{"spray_noeviction", caseSprayNoEviction},
	}
	for _, c := range cases {
		t.Run(c.name, c.fn)
	}
	results.Lock()
	rows := append([]row(nil), results.rows...)
	results.Unlock()
	if len(rows) == 0 {
		return
	}
	table := renderTable(rows)
	mode := "without -race"
	if raceEnabled {
		mode = "test binary under -race (server binary without)"
	}
	t.Logf("hostile-input results (%s):\n%s", mode, table)
	if path := os.Getenv("HOSTILE_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Errorf("HOSTILE_REPORT: %v", err)
		}
	}
}
