package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// TestOutputBufferLimit: a reply larger than the limit closes that client
// only.
func TestOutputBufferLimit(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{MaxOutputBuffer: 64 << 10})
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 0; i < 5000; i++ {
		pipe.Set(ctx, fmt.Sprintf("key:%06d", i), "v", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "KEYS *\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("got %d bytes, want the connection closed without the reply", len(b))
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("other client: %v", err)
	}
}

// TestClientThatDoesNotRead: a client pipelining without reading is
// disconnected once a write makes no progress for the output timeout, and
// the server keeps serving others meanwhile.
func TestClientThatDoesNotRead(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{OutputTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	done := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(c, 64<<10)
		cmd := "*2\r\n$4\r\nECHO\r\n$1000\r\n" + strings.Repeat("x", 1000) + "\r\n"
		c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for i := 0; i < 200000; i++ { // up to ~200 MB of replies, never read
			if _, err := w.WriteString(cmd); err != nil {
				done <- err
				return
			}
		}
		done <- w.Flush()
	}()
	probe := redis.NewClient(&redis.Options{Addr: addr})
	defer probe.Close()
	if err := probe.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("probe while a client stalls: %v", err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the stalled client wrote 200 MB without being disconnected")
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the client's own deadline fired: the server did not disconnect it")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stalled client not disconnected within 30s")
	}
}
