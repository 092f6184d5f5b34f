package commands_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// FuzzReservations runs a program of CL.RESERVE (every kind, alone or
// two inside CL.ALL), CL.SETTLE, CL.CANCEL, the plain limiter commands
// and clock moves, read from the fuzzer's bytes, over two keys per kind
// of an in-process server. The server must never panic or drop the
// connection; every reply must have its documented shape: a reservation
// six integers, its id -1 exactly when nothing was reserved and
// otherwise above every earlier id of its key; a settle [reserved,
// actual, reserved-actual] with the units that id reserved, and the same
// reply again for the same actual; errors only the documented ones.
//
//	go test -run '^$' -fuzz '^FuzzReservations$' -fuzztime 20000x ./commands
func FuzzReservations(f *testing.F) {
	f.Add([]byte{0, 5, 1, 0, 2, 0, 3, 9, 4, 0})
	f.Add([]byte{10, 3, 11, 7, 12, 2, 13, 1, 1, 1, 1, 2, 2, 3})
	f.Add([]byte{0, 200, 0, 200, 0, 200, 6, 255, 6, 255, 1, 0, 2, 0, 14, 1, 15, 4})
	f.Add([]byte{5, 5, 5, 5, 7, 8, 9, 1, 1, 1, 2, 2})

	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(f, server.Config{Clock: clk.Now})
	c := resptest.MustDial(f, addr)
	kinds := []struct{ word, plain string }{{"THROTTLE", "CL.THROTTLE"}, {"FIXED", "CL.FIXED"}, {"SLIDING", "CL.SLIDING"}, {"SLIDINGLOG", "CL.SLIDINGLOG"}}
	args := func(kind int, q byte) []string {
		if kind == 0 {
			return []string{"2", "10", "1", strconv.Itoa(int(q % 5))}
		}
		return []string{"5", "2s", strconv.Itoa(int(q % 7))}
	}
	type held struct {
		key      string
		id       int64
		reserved int64
		settled  []resptest.Value // the replies of its settles
	}
	round := 0

	f.Fuzz(func(t *testing.T, prog []byte) {
		round++
		clk.Set(goldenT0.Add(time.Duration(round) * time.Hour)) // fresh windows and buckets
		prefix := "r" + strconv.Itoa(round) + ":"
		lastID := map[string]int64{}
		var ids []*held
		reserve := func(kind int, key string, q byte, ttl byte) []string {
			a := append([]string{"CL.RESERVE", key, kinds[kind].word}, args(kind, q)...)
			return append(a, strconv.Itoa(1+int(ttl%4))+"s")
		}
		check6 := func(cmd []string, v resptest.Value, key string, reserved int64) {
			if v.Kind != '*' || len(v.Elems) != 6 {
				t.Fatalf("%q: %v, want six integers", cmd, v)
			}
			var r [6]int64
			for i, e := range v.Elems {
				if e.Kind != ':' {
					t.Fatalf("%q: element %d of %v", cmd, i, v)
				}
				r[i], _ = strconv.ParseInt(e.Str, 10, 64)
			}
			if r[0] == 1 && r[5] != -1 || r[0] == 0 && r[5] == -1 && len(cmd) > 0 && cmd[0] == "CL.RESERVE" {
				t.Fatalf("%q: limited %d with id %d", cmd, r[0], r[5])
			}
			if r[5] == -1 {
				return
			}
			if r[5] <= lastID[key] {
				t.Fatalf("%q: id %d after %d", cmd, r[5], lastID[key])
			}
			lastID[key] = r[5]
			ids = append(ids, &held{key: key, id: r[5], reserved: reserved})
		}
		for i := 0; i+1 < len(prog); i += 2 {
			op, x := prog[i], prog[i+1]
			kind := int(x % 4)
			key := prefix + kinds[kind].word + strconv.Itoa(int(x/4%2))
			switch op % 16 {
			case 0, 1, 2, 3: // CL.RESERVE
				cmd := reserve(kind, key, x/8, op/16)
				v, err := c.Do(cmd...)
				if err != nil {
					t.Fatalf("%q: %v", cmd, err)
				}
				if v.Kind == '-' {
					t.Fatalf("%q: %s", cmd, v.Str)
				}
				q, _ := strconv.ParseInt(cmd[len(cmd)-2], 10, 64)
				check6(cmd, v, key, q)
			case 4, 5, 6: // CL.SETTLE or CL.CANCEL of a known id, or of a wrong one
				cmd := []string{"CL.SETTLE", key, "1", strconv.Itoa(int(x % 9))}
				var h *held
				if len(ids) > 0 && op%16 != 6 {
					h = ids[int(x)%len(ids)]
					cmd[1], cmd[2] = h.key, strconv.FormatInt(h.id, 10)
				}
				if op/16%3 == 0 {
					cmd = []string{"CL.CANCEL", cmd[1], cmd[2]}
				}
				v, err := c.Do(cmd...)
				if err != nil {
					t.Fatalf("%q: %v", cmd, err)
				}
				if v.Kind == '-' {
					if !strings.HasPrefix(v.Str, "ERR no such reservation") && !strings.HasPrefix(v.Str, "ERR reservation already settled with actual ") {
						t.Fatalf("%q: %s", cmd, v.Str)
					}
					continue
				}
				if h == nil || v.Kind != '*' || len(v.Elems) != 3 {
					t.Fatalf("%q: %v", cmd, v)
				}
				actual := int64(0)
				if cmd[0] == "CL.SETTLE" {
					actual, _ = strconv.ParseInt(cmd[3], 10, 64)
				}
				want := []int64{h.reserved, actual, h.reserved - actual}
				for j, e := range v.Elems {
					if n, _ := strconv.ParseInt(e.Str, 10, 64); e.Kind != ':' || n != want[j] {
						t.Fatalf("%q: %v, want %v", cmd, v, want)
					}
				}
				if len(h.settled) > 0 && (h.settled[0].Elems[1].Str != v.Elems[1].Str) {
					t.Fatalf("%q answered %v after an earlier settle %v", cmd, v, h.settled[0])
				}
				h.settled = append(h.settled, v)
			case 7, 8: // the plain command on the key
				cmd := append([]string{kinds[kind].plain, key}, args(kind, x/8)...)
				if v, err := c.Do(cmd...); err != nil || v.Kind != '*' || len(v.Elems) != 5 {
					t.Fatalf("%q: %v %v", cmd, v, err)
				}
			case 9: // two reservations inside CL.ALL, all or none
				k2 := prefix + kinds[(kind+1)%4].word + strconv.Itoa(int(x/4%2))
				a, b := reserve(kind, key, x/8, op/16), reserve((kind+1)%4, k2, x/16, op/32)
				cmd := append(append([]string{"CL.ALL"}, a...), b...)
				v, err := c.Do(cmd...)
				if err != nil || v.Kind != '*' || len(v.Elems) != 2 {
					t.Fatalf("%q: %v %v", cmd, v, err)
				}
				l0, l1 := v.Elems[0].Elems[0].Str == "1", v.Elems[1].Elems[0].Str == "1"
				if (v.Elems[0].Elems[5].Str == "-1") != (l0 || l1) || (v.Elems[1].Elems[5].Str == "-1") != (l0 || l1) {
					t.Fatalf("%q: %v: not all or nothing", cmd, v)
				}
				qa, _ := strconv.ParseInt(a[len(a)-2], 10, 64)
				qb, _ := strconv.ParseInt(b[len(b)-2], 10, 64)
				check6(nil, v.Elems[0], key, qa)
				check6(nil, v.Elems[1], k2, qb)
			default: // move the clock
				clk.Advance(time.Duration(x) * 20 * time.Millisecond)
			}
		}
		if v, err := c.Do("PING"); err != nil || v.Str != "PONG" {
			t.Fatalf("PING: %v %v", v, err)
		}
	})
}
