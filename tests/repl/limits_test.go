package repl

// Hostile or broken peers on the replication link, with in-process nodes
// (cellserver's own server package, started by servertest) and fakes
// speaking the link's protocol: a primary that announces a huge frame, a
// replica that acknowledges what it was never sent, more replicas than
// maxclients, and two nodes told to replicate from each other.

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/syncbuf"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/server"
	"github.com/cellserver/cellserver/tests/internal/harness"
	"github.com/redis/go-redis/v9"
)

// inproc is one in-process cellserver.
type inproc struct {
	srv  *server.Server
	addr string
	rdb  *redis.Client
	logs *syncbuf.Buffer
}

// startInproc starts a node with cfg, its log kept in memory.
func startInproc(t *testing.T, cfg server.Config) *inproc {
	t.Helper()
	logs := &syncbuf.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, addr := servertest.Start(t, cfg)
	rdb := newClient(addr, 0)
	t.Cleanup(func() {
		rdb.Close()
		if t.Failed() {
			t.Logf("--- log of %s:\n%s", addr, logs)
		}
	})
	return &inproc{srv: srv, addr: addr, rdb: rdb, logs: logs}
}

func (n *inproc) hostPort() string {
	h, p, _ := net.SplitHostPort(n.addr)
	return h + " " + p
}

// replInfo returns the fields of INFO replication.
func (n *inproc) replInfo(t *testing.T) map[string]string {
	t.Helper()
	s, err := n.rdb.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatalf("INFO on %s: %v", n.addr, err)
	}
	return harness.InfoFields(s)
}

// readCommand reads one RESP array of bulk strings (a command).
func readCommand(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 || n > 64 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || l < 0 || l > 1<<16 {
			return nil, fmt.Errorf("bad bulk header %q", line)
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:l])
	}
	return args, nil
}

// writeCommand sends args as a RESP array.
func writeCommand(w io.Writer, args ...string) error {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := w.Write(b)
	return err
}

// frame appends a replication frame: type, uvarint payload length,
// payload.
func frame(dst []byte, t byte, payload []byte) []byte {
	dst = append(dst, t)
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

// readFrame reads one replication frame.
func readFrame(br *bufio.Reader) (byte, []byte, error) {
	t, err := br.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(br)
	if err != nil || n > 1<<20 {
		return 0, nil, fmt.Errorf("frame length %d: %v", n, err)
	}
	p := make([]byte, n)
	_, err = io.ReadFull(br, p)
	return t, p, err
}

const fakeReplID = "0123456789abcdef0123456789abcdef01234567"

// TestReplicaRefusesHugeFrame (issue #26, item 5): a primary announcing a
// 1 GiB frame, beyond what the replica accepts (its proto-max-bulk-len,
// 16 MiB, plus 64 KiB), gets its link dropped at the frame's header: the
// replica logs why, holds no memory for the frame (what the process
// allocates meanwhile stays far below the 64 MiB sent behind the header,
// let alone the 1 GiB announced), and its next attempt is a full resync,
// not a continuation of the same stream.
func TestReplicaRefusesHugeFrame(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 64 MiB over loopback")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const sent = 64 << 20
	data := make([]byte, 1<<20) // the bytes behind the header, allocated before measuring
	var before runtime.MemStats
	psyncs := make(chan []string, 4)
	go func() {
		for attempt := 0; ; attempt++ {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(nc)
			for {
				args, err := readCommand(br)
				if err != nil {
					nc.Close()
					break
				}
				if !strings.EqualFold(args[0], "psync") {
					io.WriteString(nc, "+OK\r\n")
					continue
				}
				select {
				case psyncs <- args:
				default: // later retries: not looked at
				}
				if attempt > 0 {
					nc.Close() // seen what it asks for: done
					break
				}
				// A full copy of nothing, then a put announcing 1 GiB and
				// 64 MiB of it.
				io.WriteString(nc, "+FULLRESYNC "+fakeReplID+" 0\r\n")
				nc.Write(frame(nil, 'E', nil))
				// The replica acknowledges once the copy is applied (its
				// keyspace flushed): measure from then on.
				nc.SetReadDeadline(time.Now().Add(20 * time.Second))
				if tp, _, err := readFrame(br); err != nil || tp != 'a' {
					nc.Close()
					break
				}
				runtime.GC()
				runtime.ReadMemStats(&before)
				hdr := binary.AppendUvarint([]byte{'P'}, 1<<30)
				nc.Write(append(hdr, 0, 1, 'k')) // db 0, key "k"
				for n := 0; n < sent; n += len(data) {
					if _, err := nc.Write(data); err != nil {
						break
					}
				}
				nc.Close()
				break
			}
		}
	}()
	replica := startInproc(t, server.Config{ReplicaOf: strings.Replace(ln.Addr().String(), ":", " ", 1)})
	var first, second []string
	for i, p := range []*[]string{&first, &second} {
		select {
		case *p = <-psyncs:
		case <-time.After(30 * time.Second):
			t.Fatalf("PSYNC %d never came", i+1)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("first PSYNC %v, second %v; allocated %d KiB while the 1 GiB frame was refused", first[1:], second[1:], alloc>>10)
	if second[1] != "?" || second[2] != "-1" {
		t.Errorf("after the refused frame the replica asked PSYNC %s %s, want a full resync (PSYNC ? -1)", second[1], second[2])
	}
	if alloc > 16<<20 {
		t.Errorf("the process allocated %d MiB while a 1 GiB frame was announced (%d MiB sent); want < 16 MiB", alloc>>20, sent>>20)
	}
	if !replica.logs.Contains("frame larger than this replica accepts") {
		t.Errorf("the replica did not log the refused frame")
	}
}

// fakeReplica links to a primary as a cellserver replica would, up to the
// end of its full copy.
type fakeReplica struct {
	nc   net.Conn
	br   *bufio.Reader
	from int64 // the offset of +FULLRESYNC
}

// dialReplica asks addr for a full sync and returns the first reply line.
func dialReplica(t *testing.T, addr string) (*fakeReplica, string) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	f := &fakeReplica{nc: nc, br: bufio.NewReader(nc)}
	// Every stream version's capability: the test runs on any.
	writeCommand(nc, "REPLCONF", "capa", "cellserver-values-1", "capa", "cellserver-values-2", "capa", "cellserver-values-3")
	writeCommand(nc, "PSYNC", "?", "-1")
	line, _ := f.br.ReadString('\n')
	if strings.HasPrefix(line, "+OK") {
		line, _ = f.br.ReadString('\n')
	}
	line = strings.TrimSpace(line)
	if fields := strings.Fields(line); len(fields) == 3 && fields[0] == "+FULLRESYNC" {
		f.from, _ = strconv.ParseInt(fields[2], 10, 64)
	}
	return f, line
}

// untilFrame reads frames until one of type want.
func (f *fakeReplica) untilFrame(t *testing.T, want byte) {
	t.Helper()
	for {
		tp, _, err := readFrame(f.br)
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if tp == want {
			return
		}
	}
}

// TestAckBeyondSentIsCapped (issue #26, item 6a): a replica acknowledging
// an offset beyond what its primary sent it is counted at the offset sent:
// INFO shows no more, and WAIT does not count it for a write it was never
// sent.
func TestAckBeyondSentIsCapped(t *testing.T) {
	primary := startInproc(t, server.Config{})
	ctx := context.Background()
	f, line := dialReplica(t, primary.addr)
	if !strings.HasPrefix(line, "+FULLRESYNC") {
		t.Fatalf("PSYNC: %q", line)
	}
	f.untilFrame(t, 'E')
	f.untilFrame(t, 'K') // a keepalive: the primary has sent beyond the copy's offset
	f.nc.Write(frame(nil, 'a', binary.AppendUvarint(nil, 1<<62)))
	var slave0 string
	testwait.For(t, 20*time.Second, "the ack counted", func() (bool, string) {
		slave0 = primary.replInfo(t)["slave0"]
		_, off, _ := strings.Cut(slave0, "offset=")
		off, _, _ = strings.Cut(off, ",")
		n, _ := strconv.ParseInt(off, 10, 64)
		return n > f.from, slave0
	})
	m := primary.replInfo(t)
	_, off, _ := strings.Cut(m["slave0"], "offset=")
	off, _, _ = strings.Cut(off, ",")
	acked, _ := strconv.ParseInt(off, 10, 64)
	master, _ := strconv.ParseInt(m["master_repl_offset"], 10, 64)
	if acked > master {
		t.Errorf("INFO shows the replica at offset %d, beyond the primary's %d (%s)", acked, master, m["slave0"])
	}
	if err := primary.rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The replica acknowledges nothing more: WAIT must not count it.
	n, err := primary.rdb.Wait(ctx, 1, 100*time.Millisecond).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("WAIT 1 counted %d replica(s) for a write the replica never acknowledged (its ack of 2^62 was beyond what it was sent)", n)
	}
}

// TestReplicaLinksCountTowardsMaxClients (issue #26, item 6b): replicas are
// clients: with maxclients 20, the 21st replica is refused with Redis's
// error, a client past the limit too, and a slot freed by a replica that
// leaves serves the next.
func TestReplicaLinksCountTowardsMaxClients(t *testing.T) {
	const maxClients, tries = 20, 100
	primary := startInproc(t, server.Config{MaxClients: maxClients})
	repl := primary.srv.Commands().Replication()
	accepted, refused := 0, map[string]int{}
	var links []*fakeReplica
	for i := 0; i < tries; i++ {
		f, line := dialReplica(t, primary.addr)
		if !strings.HasPrefix(line, "+FULLRESYNC") {
			refused[line]++
			f.nc.Close()
			continue
		}
		accepted++
		links = append(links, f)
		// The link has left the connection layer once the primary lists it.
		testwait.For(t, 20*time.Second, "the replica listed", func() (bool, string) {
			n := repl.Stats().ConnectedReplicas
			return n == accepted, fmt.Sprintf("%d replicas", n)
		})
	}
	t.Logf("maxclients %d: %d of %d replicas accepted; refused: %v", maxClients, accepted, tries, refused)
	if accepted != maxClients {
		t.Fatalf("%d replicas accepted with maxclients %d", accepted, maxClients)
	}
	if want := "-ERR max number of clients reached"; refused[want] != tries-maxClients {
		t.Errorf("refusals %v, want %d of %q", refused, tries-maxClients, want)
	}
	// A client: refused as it connects (read before writing anything).
	nc, err := net.DialTimeout("tcp", primary.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(nc)
	nc.Close()
	if string(got) != "-ERR max number of clients reached\r\n" {
		t.Errorf("a client with %d replicas and maxclients %d got %q, want the maxclients error", maxClients, maxClients, got)
	}
	links[0].nc.Close()
	testwait.For(t, 20*time.Second, "the closed link gone", func() (bool, string) {
		n := repl.Stats().ConnectedReplicas
		return n == maxClients-1, fmt.Sprintf("%d replicas", n)
	})
	if _, line := dialReplica(t, primary.addr); !strings.HasPrefix(line, "+FULLRESYNC") {
		t.Errorf("a replica in the freed slot: %q", line)
	}
}

// TestReplicationLoopRefused (issue #26, item 6c): B replicates from A;
// then A is told REPLICAOF B. B refuses A (A is its primary), A logs the
// loop and stays unsynced, and B keeps following A.
func TestReplicationLoopRefused(t *testing.T) {
	ctx := context.Background()
	a := startInproc(t, server.Config{})
	b := startInproc(t, server.Config{})
	if err := b.rdb.Do(ctx, "REPLICAOF", strings.Fields(a.hostPort())[0], strings.Fields(a.hostPort())[1]).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "B in sync with A", func() (bool, string) {
		m := b.replInfo(t)
		return m["master_link_status"] == "up", "master_link_status:" + m["master_link_status"]
	})
	h, p, _ := net.SplitHostPort(b.addr)
	if err := a.rdb.Do(ctx, "REPLICAOF", h, p).Err(); err != nil {
		t.Fatal(err)
	}
	loop := func() bool { return a.logs.Contains("would make a loop") || a.logs.Contains("replication loop") }
	testwait.For(t, 20*time.Second, "A refused as a loop, or linked", func() (bool, string) {
		up := a.replInfo(t)["master_link_status"] == "up"
		return up || loop(), fmt.Sprintf("A master_link_status up %v", up)
	})
	if m := a.replInfo(t); m["master_link_status"] != "down" {
		t.Errorf("A, made a replica of its own replica, has its link %s (a loop)", m["master_link_status"])
	}
	if !loop() {
		t.Errorf("A did not log the loop")
	}
	if !b.logs.Contains("refused a replica that this node replicates from") {
		t.Errorf("B did not log refusing A")
	}
	if m := b.replInfo(t); m["role"] != "slave" || m["master_link_status"] != "up" {
		t.Errorf("B: role %s, link %s; want B still following A", m["role"], m["master_link_status"])
	}
}

// TestLargeValuesReplicateInSplitFrames: values far larger than a frame a
// replica accepts (here its proto-max-bulk-len is 128 KiB, so 192 KiB a
// frame) reach it and, through its backlog, its own replica: the primary
// splits them into 64 KiB frames, in the full copy and in the stream, and
// the replica's backlog holds the very bytes the primary sent (the
// offsets agree, and a partial resync continues from them).
func TestLargeValuesReplicateInSplitFrames(t *testing.T) {
	ctx := context.Background()
	primary := startInproc(t, server.Config{})
	before := strings.Repeat("b", 1<<20)
	if err := primary.rdb.Set(ctx, "before", before, 0).Err(); err != nil {
		t.Fatal(err)
	}
	r1 := startInproc(t, server.Config{ReplicaOf: primary.hostPort(), MaxBulkLen: 128 << 10})
	r2 := startInproc(t, server.Config{ReplicaOf: r1.hostPort(), MaxBulkLen: 128 << 10})
	after := strings.Repeat("a", 3<<20+12345)
	if err := primary.rdb.Set(ctx, "after", after, 0).Err(); err != nil {
		t.Fatal(err)
	}
	inSync := func(what string) {
		t.Helper()
		testwait.For(t, 30*time.Second, what, func() (bool, string) {
			p, a, b := primary.replInfo(t), r1.replInfo(t), r2.replInfo(t)
			ok := a["master_link_status"] == "up" && b["master_link_status"] == "up" &&
				a["slave_repl_offset"] == p["master_repl_offset"] && b["slave_repl_offset"] == p["master_repl_offset"]
			return ok, fmt.Sprintf("primary %s, r1 %s %s, r2 %s %s", p["master_repl_offset"],
				a["master_link_status"], a["slave_repl_offset"], b["master_link_status"], b["slave_repl_offset"])
		})
	}
	inSync("both replicas at the primary's offset")
	for _, n := range []*inproc{r1, r2} {
		for key, want := range map[string]string{"before": before, "after": after} {
			if got, err := n.rdb.Get(ctx, key).Result(); err != nil || got != want {
				t.Errorf("%s on %s: %d bytes, %v; want %d bytes", key, n.addr, len(got), err, len(want))
			}
		}
	}
	if r1.logs.Contains("frame larger") || r2.logs.Contains("frame larger") {
		t.Errorf("a replica refused a frame of a legitimate stream")
	}
	// r2 continues from r1's backlog after its link is cut.
	if err := r2.rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	if err := primary.rdb.Set(ctx, "later", after, 0).Err(); err != nil {
		t.Fatal(err)
	}
	inSync("both replicas at the primary's offset after the cut")
	if !r2.logs.Contains("partial resync") {
		t.Errorf("r2 did not continue from r1's backlog after the cut")
	}
}
