// Command clustertopo measures what a large cluster topology costs a node
// (issue #26, item 3): it pushes a generated topology with CELLCLUSTER
// CONFIG, then has -clients connections loop CLUSTER SLOTS (or SHARDS,
// NODES) for -duration while one more connection sends PING every
// -ping-every, and prints the PING latencies, the replies read, the
// connections the server closed, and the server's peak RSS (VmHWM of
// /proc/PID/status, PID from INFO server's process_id).
//
// The topology has -shards shards of one master and -replicas replicas
// each, and 16384 one-slot ranges dealt to the shards in turn, so that no
// two adjacent slots share a shard: CLUSTER SLOTS then lists every shard's
// nodes 16384/shards times. Node ids are 40 hex digits (the only length
// a topology accepts); -ipv6 gives every node the longest address the
// topology accepts (45 bytes).
//
//	go run ./bench/clustertopo -addr 127.0.0.1:7001 -shards 2 -replicas 1000
//
// Needs a server started with --cluster-enabled yes on the same machine.
// It reads only replies; it never stores one.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "server address")
	shards := flag.Int("shards", 2, "shards")
	replicas := flag.Int("replicas", 1000, "replicas per shard")
	ipv6 := flag.Bool("ipv6", false, "45-byte IPv6 addresses instead of 127.0.0.1")
	clients := flag.Int("clients", 4, "connections looping the command")
	cmd := flag.String("cmd", "SLOTS", "CLUSTER subcommand the clients loop: SLOTS, SHARDS or NODES")
	duration := flag.Duration("duration", 60*time.Second, "how long the clients loop")
	pingEvery := flag.Duration("ping-every", 100*time.Millisecond, "pause between two PINGs of the probe")
	flag.Parse()
	if err := run(*addr, *shards, *replicas, *ipv6, *clients, *cmd, *duration, *pingEvery); err != nil {
		fmt.Fprintln(os.Stderr, "clustertopo:", err)
		os.Exit(1)
	}
}

func topology(shards, replicas int, ipv6 bool) string {
	ip := "127.0.0.1"
	if ipv6 {
		ip = "0000:0000:0000:0000:0000:ffff:255.255.255.255"
	}
	port := 10000
	node := func(b *strings.Builder) {
		id := fmt.Sprintf("%040d", port)
		fmt.Fprintf(b, `{"id":%q,"ip":%q,"port":%d}`, id, ip, port)
		port++
	}
	var b strings.Builder
	b.WriteByte('[')
	for s := 0; s < shards; s++ {
		if s > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"slot_ranges":[`)
		for slot, first := s, true; slot < 16384; slot += shards {
			if !first {
				b.WriteByte(',')
			}
			first = false
			fmt.Fprintf(&b, `{"start":%d,"end":%d}`, slot, slot)
		}
		b.WriteString(`],"master":`)
		node(&b)
		b.WriteString(`,"replicas":[`)
		for r := 0; r < replicas; r++ {
			if r > 0 {
				b.WriteByte(',')
			}
			node(&b)
		}
		b.WriteString(`]}`)
	}
	b.WriteByte(']')
	return b.String()
}

// conn is one RESP connection.
type conn struct {
	nc net.Conn
	r  *bufio.Reader
}

func dial(addr string) (*conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, r: bufio.NewReaderSize(nc, 1<<20)}, nil
}

func (c *conn) send(args ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := io.WriteString(c.nc, b.String())
	return err
}

// skip reads one reply, keeping none of it, and returns its size in bytes
// and its first line.
func (c *conn) skip() (int64, string, error) {
	var size int64
	line := func() (string, error) {
		l, err := c.r.ReadString('\n')
		size += int64(len(l))
		return strings.TrimRight(l, "\r\n"), err
	}
	first, err := line()
	if err != nil {
		return size, "", err
	}
	pending := 1
	cur := first
	for {
		pending--
		if len(cur) == 0 {
			return size, first, errors.New("empty line in reply")
		}
		switch cur[0] {
		case '*', '%', '~', '>':
			n, _ := strconv.Atoi(cur[1:])
			if n > 0 {
				if cur[0] == '%' {
					n *= 2
				}
				pending += n
			}
		case '$', '=':
			n, _ := strconv.Atoi(cur[1:])
			if n >= 0 {
				d, err := c.r.Discard(n + 2)
				size += int64(d)
				if err != nil {
					return size, first, err
				}
			}
		}
		if pending == 0 {
			return size, first, nil
		}
		if cur, err = line(); err != nil {
			return size, first, err
		}
	}
}

func (c *conn) do(args ...string) (string, error) {
	if err := c.send(args...); err != nil {
		return "", err
	}
	_, first, err := c.skip()
	return first, err
}

func vmHWM(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:"))
		}
	}
	return "?"
}

func run(addr string, shards, replicas int, ipv6 bool, clients int, cmd string, duration, pingEvery time.Duration) error {
	admin, err := dial(addr)
	if err != nil {
		return err
	}
	if err := admin.send("INFO", "server"); err != nil {
		return err
	}
	hdr, err := admin.r.ReadString('\n')
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(hdr[1:]))
	info := make([]byte, n+2)
	if _, err := io.ReadFull(admin.r, info); err != nil {
		return err
	}
	pid := ""
	for _, l := range strings.Split(string(info), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			pid = v
		}
	}
	top := topology(shards, replicas, ipv6)
	fmt.Printf("topology: %d shards x (1 master + %d replicas) = %d nodes, 16384 one-slot ranges, config %d bytes\n",
		shards, replicas, shards*(1+replicas), len(top))
	fmt.Printf("server pid %s, VmHWM before: %s\n", pid, vmHWM(pid))
	t0 := time.Now()
	first, err := admin.do("CELLCLUSTER", "CONFIG", top)
	if err != nil {
		return err
	}
	fmt.Printf("CELLCLUSTER CONFIG: %s (%.2fs)\n", first, time.Since(t0).Seconds())
	if first != "+OK" {
		return nil
	}

	var replies, drops, bytes atomic.Int64
	var maxReply atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *conn
			for {
				select {
				case <-stop:
					if c != nil {
						c.nc.Close()
					}
					return
				default:
				}
				if c == nil {
					if c, err = dial(addr); err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
				}
				if c.send("CLUSTER", cmd) != nil {
					c.nc.Close()
					c = nil
					drops.Add(1)
					continue
				}
				size, _, err := c.skip()
				if err != nil {
					c.nc.Close()
					c = nil
					drops.Add(1)
					continue
				}
				replies.Add(1)
				bytes.Add(size)
				for {
					m := maxReply.Load()
					if size <= m || maxReply.CompareAndSwap(m, size) {
						break
					}
				}
			}
		}()
	}

	probe, err := dial(addr)
	if err != nil {
		return err
	}
	var lat []time.Duration
	end := time.Now().Add(duration)
	for time.Now().Before(end) {
		t := time.Now()
		if r, err := probe.do("PING"); err != nil || r != "+PONG" {
			return fmt.Errorf("PING: %q %v", r, err)
		}
		lat = append(lat, time.Since(t))
		time.Sleep(pingEvery)
	}
	close(stop)
	hwm := vmHWM(pid)
	// A client stuck in a reply ends when the server closes it or the
	// reply ends; do not wait for it longer than a minute.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		fmt.Println("(clients still reading after 1 min; not waited for)")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("%d clients looping CLUSTER %s for %s: %d replies (largest %d bytes, %d bytes in all), %d connections closed by the server\n",
		clients, cmd, duration, replies.Load(), maxReply.Load(), bytes.Load(), drops.Load())
	fmt.Printf("PING (%d, every %s + its latency): p50 %s, p99 %s, max %s\n",
		len(lat), pingEvery, pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	fmt.Printf("server VmHWM (peak RSS): %s\n", hwm)
	return nil
}
