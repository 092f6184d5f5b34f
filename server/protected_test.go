package server_test

import (
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

// remote pretends every client comes from another host, so protected mode
// can be exercised over loopback.
func remote(string) bool { return false }

func TestProtectedModeRefusesRemoteClients(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  server.Config
		ok   bool
	}{
		{"protected, no password", server.Config{Loopback: remote}, false},
		{"protected mode off", server.Config{Loopback: remote, DisableProtectedMode: true}, true},
		{"password set", server.Config{Loopback: remote, Password: "s3cret"}, true},
		{"default user's password from the config's users", server.Config{Loopback: remote, Users: []string{"default on >s3cret ~* &* +@all"}}, true},
		{"loopback client", server.Config{}, true},
	} {
		_, addr := servertest.Start(t, tc.cfg)
		pass := tc.cfg.Password
		if len(tc.cfg.Users) > 0 {
			pass = "s3cret"
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, Password: pass, MaxRetries: -1})
		err := rdb.Ping(ctx).Err()
		rdb.Close()
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok {
			if err == nil {
				t.Errorf("%s: served", tc.name)
			}
			// The exact reply, then the connection closes.
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write([]byte("PING\r\n"))
			all, _ := io.ReadAll(c)
			c.Close()
			if !strings.HasPrefix(string(all), "-DENIED cellserver is running in protected mode") || !strings.HasSuffix(string(all), "\r\n") ||
				strings.Count(string(all), "\r\n") != 1 {
				t.Errorf("%s: got %q, want one DENIED error then close", tc.name, all)
			}
		}
	}
}

// In protected mode, clients from other hosts are refused as they are
// accepted: each gets the DENIED error at once, without sending anything,
// and the close, and none takes a connection slot, so idle remote
// connections cannot lock local clients out. The remote clients connect
// from 127.0.0.2, which the injected check classifies as not loopback.
func TestProtectedModeRefusesAtAccept(t *testing.T) {
	notLocal := func(addr string) bool { return !strings.HasPrefix(addr, "127.0.0.2:") }
	const maxClients, remotes = 3, 50
	for _, loops := range []int{0, -1} {
		_, addr := servertest.Start(t, server.Config{Loopback: notLocal, MaxClients: maxClients + 1, EventLoops: loops})
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
		var held []net.Conn
		for range remotes {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				t.Skipf("cannot connect from 127.0.0.2: %v", err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			held = append(held, c)
		}
		// Every local client is served while the remote ones are held.
		for i := range maxClients {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write([]byte("PING\r\n"))
			line := make([]byte, len("+PONG\r\n"))
			_, err = io.ReadFull(c, line)
			if err != nil || string(line) != "+PONG\r\n" {
				t.Fatalf("loops %d: local client %d with %d remote ones connected: %q, %v", loops, i, remotes, line, err)
			}
			defer c.Close()
		}
		for i, c := range held {
			all, _ := io.ReadAll(c)
			c.Close()
			if s := string(all); !strings.HasPrefix(s, "-DENIED cellserver is running in protected mode") ||
				!strings.HasSuffix(s, "\r\n") || strings.Count(s, "\r\n") != 1 {
				t.Fatalf("loops %d: remote client %d got %q, want one DENIED error then the close", loops, i, all)
			}
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		info, err := rdb.Info(context.Background(), "clients", "stats").Result()
		rdb.Close()
		if err != nil {
			t.Fatal(err)
		}
		// The three held local clients and the one asking.
		for _, want := range []string{"connected_clients:4\r\n", fmt.Sprintf("rejected_connections:%d\r\n", remotes)} {
			if !strings.Contains(info, want) {
				t.Errorf("loops %d: INFO lacks %q:\n%s", loops, want, info)
			}
		}
	}
}
