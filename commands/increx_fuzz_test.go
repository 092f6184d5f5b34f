package commands_test

import (
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// increxErrors are the errors INCREX may answer.
var increxErrors = map[string]bool{
	"ERR syntax error": true,
	"ERR value is not an integer or out of range":        true,
	"ERR value is not a valid float":                     true,
	"ERR LBOUND must be less than or equal to UBOUND":    true,
	"ERR invalid expire time in 'increx' command":        true,
	"ERR wrong number of arguments for 'increx' command": true,
}

// FuzzIncrexArgs sends INCREX with random arguments (a space-separated
// list, the words drawn from the fuzzer) to an in-process server over one
// connection: the server must never panic or drop the connection, and
// every reply must be one of INCREX's errors or a pair of integers, or of
// bulk strings with BYFLOAT. PING must answer afterwards.
//
//	go test -run '^$' -fuzz '^FuzzIncrexArgs$' -fuzztime 30s ./commands
func FuzzIncrexArgs(f *testing.F) {
	for _, s := range []string{
		"", "BYINT 1 UBOUND 100 EX 60 ENX", "BYFLOAT 0.5 LBOUND -1.5 PERSIST", "BYINT 5 LBOUND 0 UBOUND 100 SATURATE EX 60 ENX",
		"BYINT 9223372036854775807 SATURATE", "BYFLOAT 1e4932", "BYFLOAT 0x1p-16445", "ENX", "EX 0", "PXAT 1 ENX",
		"BYINT 1 BYFLOAT 1", "LBOUND 5 UBOUND 4", "SATURATE SATURATE persist", "BYFLOAT inf", "BYFLOAT 1e-99999999999",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	_, addr := servertest.Start(f, server.Config{Clock: servertest.NewClock(goldenT0).Now})
	c := resptest.MustDial(f, addr)
	f.Fuzz(func(t *testing.T, args string, float bool) {
		if len(args) > 512 {
			return
		}
		if float {
			c.MustDo(t, "SET", "fz", "1.5")
		} else {
			c.MustDo(t, "SET", "fz", "7")
		}
		cmd := append([]string{"INCREX", "fz"}, strings.Fields(args)...)
		got, err := c.Do(cmd...)
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		switch {
		case got.Kind == '-':
			if !increxErrors[got.Str] {
				t.Fatalf("%q: unexpected error %q", cmd, got.Str)
			}
		case got.Kind == '*' && len(got.Elems) == 2 && got.Elems[0].Kind == got.Elems[1].Kind &&
			(got.Elems[0].Kind == ':' || got.Elems[0].Kind == '$'):
		default:
			t.Fatalf("%q: reply %v", cmd, got)
		}
		if p := c.MustDo(t, "PING"); p.Str != "PONG" {
			t.Fatalf("PING after %q: %v", cmd, p)
		}
	})
}
