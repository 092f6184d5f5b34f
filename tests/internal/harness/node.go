package harness

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/testwait"
)

// Client is a go-redis client for one node of a multi-process test:
// RESP2, no retries (a command sent to a killed node fails rather than
// going to its successor), 1 s to dial, 3 s to read or write.
func Client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
}

// InfoFields parses an INFO reply into its fields (section headers and
// blank lines left out).
func InfoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

// Info returns the fields of INFO section of the node at addr, asked on
// a connection of its own.
func Info(ctx context.Context, addr, section string) (map[string]string, error) {
	c := Client(addr)
	defer c.Close()
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return InfoFields(s), nil
}

// WaitPing waits (timeout at most) until the process p answers PING at
// addr, failing the test at once with p's log if p exits first.
func WaitPing(t testing.TB, p *Proc, addr string, timeout time.Duration) {
	t.Helper()
	c := Client(addr)
	defer c.Close()
	testwait.For(t, timeout, p.Name+" answers PING", func() (bool, string) {
		if !p.Alive() {
			t.Fatalf("%s exited: %v\n%s", p.Name, p.Err, p.Logs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := c.Ping(ctx).Err()
		return err == nil, fmt.Sprint(err)
	})
}

// WaitReplicaOf waits (timeout at most) until the node name at addr
// reports role:slave of primary (host:port) with master_link_status:up.
func WaitReplicaOf(t testing.TB, name, addr, primary string, timeout time.Duration) {
	t.Helper()
	host, port, _ := net.SplitHostPort(primary)
	testwait.For(t, timeout, fmt.Sprintf("%s replicates %s (role:slave, link up)", name, primary), func() (bool, string) {
		m, err := Info(context.Background(), addr, "replication")
		if err != nil {
			return false, err.Error()
		}
		return m["role"] == "slave" && m["master_host"] == host && m["master_port"] == port && m["master_link_status"] == "up",
			fmt.Sprintf("role %s master %s:%s link %s", m["role"], m["master_host"], m["master_port"], m["master_link_status"])
	})
}

// WaitMaster waits (timeout at most) until the node name at addr reports
// role:master.
func WaitMaster(t testing.TB, name, addr string, timeout time.Duration) {
	t.Helper()
	testwait.For(t, timeout, name+" reports role:master", func() (bool, string) {
		m, err := Info(context.Background(), addr, "replication")
		if err != nil {
			return false, err.Error()
		}
		return m["role"] == "master", "role " + m["role"]
	})
}
