package commands_test

import (
	"strconv"
	"testing"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// FuzzGroupCommands plays random sequences of consumer group commands
// (XGROUP, XREADGROUP, XACK, XCLAIM, XAUTOCLAIM, XPENDING, XINFO) mixed
// with XADD, XDEL and XTRIM on one stream over one connection: the server
// must answer each (never panic nor drop the connection), and XINFO STREAM
// FULL must describe the stream afterwards.
//
//	go test -run '^$' -fuzz '^FuzzGroupCommands$' -fuzztime 30s ./commands
func FuzzGroupCommands(f *testing.F) {
	f.Add([]byte{1, 0, 0, 1, 0, 2, 2, 3, 3, 0, 4, 0, 5, 3, 6, 3, 7, 1, 9, 0, 10, 0})
	f.Add([]byte{0, 0, 0, 0, 1, 9, 2, 0, 7, 0, 3, 0, 6, 0, 8, 1, 8, 2, 11, 1, 2, 0, 10, 0})
	_, addr := servertest.Start(f, server.Config{})
	c := resptest.MustDial(f, addr)
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 400 {
			ops = ops[:400]
		}
		c.MustDo(t, "DEL", "fz")
		next := 1
		id := func(b byte) string { return strconv.Itoa(int(b)%(next+1)) + "-0" }
		for i := 0; i+1 < len(ops); i += 2 {
			op, a := ops[i], ops[i+1]
			g := "g" + strconv.Itoa(int(a%3))
			cn := "c" + strconv.Itoa(int(a/3%3))
			n := strconv.Itoa(int(a % 5))
			var args []string
			switch op % 12 {
			case 0:
				args = []string{"XADD", "fz", strconv.Itoa(next) + "-0", "f", strconv.Itoa(int(a))}
				next++
			case 1:
				args = []string{"XGROUP", "CREATE", "fz", g, id(a), "MKSTREAM"}
			case 2:
				args = []string{"XREADGROUP", "GROUP", g, cn, "COUNT", n, "STREAMS", "fz", ">"}
			case 3:
				args = []string{"XREADGROUP", "GROUP", g, cn, "STREAMS", "fz", id(a)}
			case 4:
				args = []string{"XACK", "fz", g, id(a), id(a / 2)}
			case 5:
				args = []string{"XCLAIM", "fz", g, cn, "0", id(a), "FORCE"}
				if a%2 == 0 {
					args = append(args, "JUSTID", "LASTID", id(a/3))
				}
			case 6:
				args = []string{"XAUTOCLAIM", "fz", g, cn, "0", id(a), "COUNT", strconv.Itoa(int(a%5) + 1)}
			case 7:
				args = []string{"XDEL", "fz", id(a)}
			case 8:
				switch a % 4 {
				case 0:
					args = []string{"XGROUP", "DELCONSUMER", "fz", g, cn}
				case 1:
					args = []string{"XGROUP", "DESTROY", "fz", g}
				case 2:
					args = []string{"XGROUP", "SETID", "fz", g, id(a), "ENTRIESREAD", strconv.Itoa(int(a%7) - 1)}
				default:
					args = []string{"XGROUP", "CREATECONSUMER", "fz", g, cn}
				}
			case 9:
				args = []string{"XPENDING", "fz", g, "IDLE", n, "-", "+", "10", cn}
			case 10:
				args = []string{"XINFO", "GROUPS", "fz"}
			default:
				args = []string{"XTRIM", "fz", "MAXLEN", n}
			}
			if _, err := c.Do(args...); err != nil {
				t.Fatalf("%q: %v", args, err)
			}
		}
		v, err := c.Do("XINFO", "STREAM", "fz", "FULL")
		if err != nil || (v.Kind != '*' && v.Kind != '-') {
			t.Fatalf("XINFO STREAM FULL: %v %v", v, err)
		}
		if v := c.MustDo(t, "PING"); v.Str != "PONG" {
			t.Fatalf("PING: %v", v)
		}
	})
}
