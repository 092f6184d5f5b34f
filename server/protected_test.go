package server_test

import (
	"context"
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
		{"loopback client", server.Config{}, true},
	} {
		_, addr := servertest.Start(t, tc.cfg)
		rdb := redis.NewClient(&redis.Options{Addr: addr, Password: tc.cfg.Password, MaxRetries: -1})
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
