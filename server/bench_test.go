package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// benchKeys is the number of distinct keys the loopback benchmarks cycle
// through; benchDepth the pipeline depth of BenchmarkPipelinedThrottle.
const (
	benchKeys  = 1024
	benchDepth = 16
)

// BenchmarkPipelinedThrottle measures CL.THROTTLE over a real loopback TCP
// connection to an in-process server: one connection writes 16 pre-encoded
// commands at once (one write) and reads the 16 replies, cycling over 1024
// keys at 15 30 60 (allowed for the first 16 calls of a key, then limited).
// One op is one command, so ns/op is the time per command at pipeline
// depth 16, and allocs/op counts client and server allocations per command
// (the server runs in this process).
func BenchmarkPipelinedThrottle(b *testing.B) {
	_, addr := servertest.Start(b, server.Config{})
	benchPipelinedThrottle(b, addr, benchKeys)
}

// BenchmarkPipelinedThrottleReplicas is BenchmarkPipelinedThrottle over
// 100000 keys (so that almost every call changes its key and is
// replicated) on a primary with 0 or 2 in-process replicas attached. The
// replicas run in this process: ns/op includes their work.
func BenchmarkPipelinedThrottleReplicas(b *testing.B) {
	for _, replicas := range []int{0, 2} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			_, addr := servertest.Start(b, server.Config{})
			host, port, _ := net.SplitHostPort(addr)
			for range replicas {
				servertest.Start(b, server.Config{ReplicaOf: host + " " + port})
			}
			benchPipelinedThrottle(b, addr, 100000)
		})
	}
}

func benchPipelinedThrottle(b *testing.B, addr string, keys int) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Minute))
	rd := bufio.NewReaderSize(nc, 64<<10)

	cmds := make([][]byte, keys)
	for i := range cmds {
		cmds[i] = benchEncode("CL.THROTTLE", "bench:key:"+strconv.Itoa(i), "15", "30", "60")
	}
	wbuf := make([]byte, 0, benchDepth*64)

	b.ReportAllocs()
	next := 0
	for left := b.N; left > 0; {
		n := min(benchDepth, left)
		left -= n
		wbuf = wbuf[:0]
		for range n {
			wbuf = append(wbuf, cmds[next]...)
			next = (next + 1) % keys
		}
		if _, err := nc.Write(wbuf); err != nil {
			b.Fatal(err)
		}
		for range n {
			if err := benchReadThrottle(rd); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkGoRedisThrottle measures CL.THROTTLE through go-redis Do with
// b.RunParallel (GOMAXPROCS goroutines sharing one client and its
// connection pool), each goroutine cycling over its own 1024 keys. One op
// is one command and one round trip.
func BenchmarkGoRedisThrottle(b *testing.B) {
	_, addr := servertest.Start(b, server.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	var worker atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := worker.Add(1)
		keys := make([]string, benchKeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("bench:g%d:%d", w, i)
		}
		i := 0
		for pb.Next() {
			v, err := rdb.Do(ctx, "CL.THROTTLE", keys[i], 15, 30, 60).Slice()
			if err != nil {
				b.Error(err)
				return
			}
			if len(v) != 5 {
				b.Errorf("reply %v", v)
				return
			}
			i = (i + 1) % benchKeys
		}
	})
}

// benchEncode returns args as a RESP2 array of bulk strings.
func benchEncode(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// benchReadThrottle reads one CL.THROTTLE reply: an array of 5 integers.
func benchReadThrottle(rd *bufio.Reader) error {
	line, err := rd.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.Equal(line, []byte("*5\r\n")) {
		rest, _ := rd.Peek(rd.Buffered())
		return fmt.Errorf("reply %q, want an array of 5", append(line, rest...))
	}
	for range 5 {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) < 4 || line[0] != ':' {
			return fmt.Errorf("reply element %q, want an integer", line)
		}
	}
	return nil
}
