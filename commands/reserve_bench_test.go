package commands_test

import (
	"bytes"
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/resp"
)

// BenchmarkReserveSettle compares the two ways of admitting a request
// whose cost is known afterwards, through ServeRESP as
// BenchmarkDispatchThrottle (real command table, no network, real clock):
// one op is one pair of commands.
//   - reserve: CL.RESERVE key THROTTLE ... 10 10ms, then CL.SETTLE key id 4
//     (the id read back from the reply: a few ns of the op).
//   - throttle: CL.THROTTLE key ... 10, then CL.THROTTLE key ... -6 (the
//     reserve-and-refund idiom of redis-cell).
//
// The bucket (1e6 per second, burst 1e12) never fills, so every request
// is admitted and every settle gives units back. Cases: keys1024 (1024
// keys in turn: each key holds a few reservations, their 10 ms ttl
// ending between visits; 1 ms made the settle miss its reservation after
// a pause of the real clock) and hot (one key: the settled reservations
// are kept until their 10 ms ttl ends, a few thousand at this rate, and
// scanned at most once per millisecond: Reservations.Tidy). The two variants of a case run one after the other,
// so -count=N interleaves them.
func BenchmarkReserveSettle(b *testing.B) {
	const bucket = "1000000000000" // burst; rate 1000000 per 1 s
	for _, c := range []struct {
		name string
		keys int
	}{{"keys1024", 1024}, {"hot", 1}} {
		keys := make([]string, c.keys)
		for i := range keys {
			keys[i] = "bench:res:" + strconv.Itoa(i)
		}
		b.Run(c.name+"/reserve", func(b *testing.B) {
			cmds := make([][][]byte, len(keys))
			settles := make([][][]byte, len(keys))
			for i, k := range keys {
				cmds[i] = byteArgs("CL.RESERVE", k, "THROTTLE", bucket, "1000000", "1", "10", "10ms")
				settles[i] = byteArgs("CL.SETTLE", k, "0", "4")
			}
			benchPairs(b, cmds, func(i int, out []byte) [][]byte {
				s := settles[i]
				s[2] = strconv.AppendInt(s[2][:0], lastInt(out), 10)
				return s
			}, "*6\r\n:0\r\n", "*3\r\n:10\r\n:4\r\n:6\r\n")
		})
		b.Run(c.name+"/throttle", func(b *testing.B) {
			cmds := make([][][]byte, len(keys))
			refunds := make([][][]byte, len(keys))
			for i, k := range keys {
				cmds[i] = byteArgs("CL.THROTTLE", k, bucket, "1000000", "1", "10")
				refunds[i] = byteArgs("CL.THROTTLE", k, bucket, "1000000", "1", "-6")
			}
			benchPairs(b, cmds, func(i int, _ []byte) [][]byte { return refunds[i] }, "*5\r\n:0\r\n", "*5\r\n:0\r\n")
		})
	}
}

// BenchmarkReserveFullKey: one plain CL.FIXED admitting a unit on a key
// holding limiter.MaxReservations open reservations (ttl 1 h): the call
// carries them into the new state without scanning them (none has
// ended). For comparison, the same call on a key holding none.
func BenchmarkReserveFullKey(b *testing.B) {
	for _, n := range []int{0, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			benchDispatchWith(b, func(srv *commands.Service) {
				conn := new(resp.Conn)
				srv.Open(conn)
				defer srv.Close(conn)
				args := byteArgs("CL.RESERVE", "bench:full", "FIXED", "1000000000", "3600", "1", "3600")
				for range n {
					conn.Out = conn.Out[:0]
					srv.ServeRESP(conn, args)
					if !bytes.HasPrefix(conn.Out, []byte("*6\r\n:0\r\n")) {
						b.Fatalf("reserve: %q", conn.Out)
					}
				}
			}, [][]string{{"CL.FIXED", "bench:full", "1000000000", "3600", "1"}})
		})
	}
}

func byteArgs(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// lastInt returns the integer of the last line of a RESP reply (":n\r\n").
func lastInt(out []byte) int64 {
	end := len(out) - 2
	var n int64
	for _, c := range out[bytes.LastIndexByte(out[:end], ':')+1 : end] {
		n = n*10 + int64(c-'0') // ids are positive
	}
	return n
}

// benchPairs runs, per op, first[i] then second(i, first's reply) for i
// in turn over the keys; both replies must start as the prefixes say
// (checked outside the timing, on the first and the last op).
func benchPairs(b *testing.B, first [][][]byte, second func(i int, out []byte) [][]byte, want1, want2 string) {
	srv, err := commands.New(commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	conn := new(resp.Conn)
	srv.Open(conn)
	defer srv.Close(conn)
	check := func(i int) {
		conn.Out = conn.Out[:0]
		srv.ServeRESP(conn, first[i])
		if !bytes.HasPrefix(conn.Out, []byte(want1)) {
			b.Fatalf("%s: %q", first[i][0], conn.Out)
		}
		s := second(i, conn.Out)
		conn.Out = conn.Out[:0]
		srv.ServeRESP(conn, s)
		if !bytes.HasPrefix(conn.Out, []byte(want2)) {
			b.Fatalf("%s: %q", s[0], conn.Out)
		}
	}
	for i := range first {
		check(i)
	}
	b.ReportAllocs()
	n := len(first)
	for i := 0; b.Loop(); i++ {
		conn.Out = conn.Out[:0]
		srv.ServeRESP(conn, first[i%n])
		s := second(i%n, conn.Out)
		conn.Out = conn.Out[:0]
		srv.ServeRESP(conn, s)
	}
	check(0)
}
