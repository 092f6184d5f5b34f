package commands_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// TestSlowlogRedactsSecrets: with every command logged, the SLOWLOG shows
// the secret arguments of AUTH, HELLO ... AUTH, CONFIG SET of a sensitive
// parameter and ACL SETUSER (its name and rules) as "(redacted)", as Redis
// 7 does, whether the call succeeded, failed or was malformed; and a
// command flagged skip_slowlog (EXEC) is not logged, the commands it ran are.
func TestSlowlogRedactsSecrets(t *testing.T) {
	const pass = "s3cret-pass"
	_, addr := servertest.Start(t, server.Config{Password: pass, SlowlogSlowerThan: time.Nanosecond, SlowlogMaxLen: 100})
	c := resptest.MustDial(t, addr)
	calls := [][]string{
		{"AUTH", pass},
		{"AUTH", "default", pass},
		{"AUTH", "guess-1"},
		{"AUTH", "admin", "guess-2"},
		{"AUTH", "a", "guess-3", "extra"},
		{"HELLO", "2", "AUTH", "default", pass, "SETNAME", "cli"},
		{"HELLO", "2", "auth", "default", "guess-4"},
		{"HELLO", "2", "AUTH", "guess-5"},
		{"CONFIG", "SET", "requirepass", "guess-6", "maxmemory", "5"},
		{"config", "set", "MASTERAUTH", "guess-7"},
		{"ACL", "SETUSER", "guess-8", "on", ">guess-9", "~*"},
		{"acl", "setuser", "u", "#guess-10", "badrule"},
		{"MULTI"},
		{"SET", "k", "v"},
		{"EXEC"},
	}
	for _, args := range calls {
		c.MustDo(t, args...)
	}
	log := c.MustDo(t, "SLOWLOG", "GET", "-1")
	var got [][]string // oldest first
	for i := len(log.Elems) - 1; i >= 0; i-- {
		var args []string
		for _, a := range log.Elems[i].Elems[3].Elems {
			args = append(args, a.Str)
		}
		got = append(got, args)
	}
	want := [][]string{
		{"AUTH", "(redacted)"},
		{"AUTH", "(redacted)", "(redacted)"},
		{"AUTH", "(redacted)"},
		{"AUTH", "(redacted)", "(redacted)"},
		{"AUTH", "(redacted)", "(redacted)", "(redacted)"},
		{"HELLO", "2", "AUTH", "(redacted)", "(redacted)", "SETNAME", "cli"},
		{"HELLO", "2", "auth", "(redacted)", "(redacted)"},
		{"HELLO", "2", "AUTH", "(redacted)"},
		{"CONFIG", "SET", "requirepass", "(redacted)", "maxmemory", "5"},
		{"config", "set", "MASTERAUTH", "(redacted)"},
		{"ACL", "SETUSER", "(redacted)", "(redacted)", "(redacted)", "(redacted)"},
		{"acl", "setuser", "(redacted)", "(redacted)", "(redacted)"},
		{"MULTI"},
		{"SET", "k", "v"}, // run by EXEC, which itself is not logged
	}
	if len(got) != len(want) {
		t.Fatalf("SLOWLOG has %d entries, want %d:\n%q", len(got), len(want), got)
	}
	for i := range want {
		if strings.Join(got[i], " ") != strings.Join(want[i], " ") {
			t.Errorf("entry %d: %q, want %q", i, got[i], want[i])
		}
	}
	if s := log.String(); strings.Contains(s, pass) || strings.Contains(s, "guess-") {
		t.Errorf("a secret is in the SLOWLOG: %s", s)
	}
}
