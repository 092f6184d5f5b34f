package commands_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// documentedRedisVersion is the sentence of docs/commands.md that states the
// version cellserver reports by default.
var documentedRedisVersion = regexp.MustCompile("cellserver reports `redis_version:([0-9.]+)` by default")

// TestAdvertisedRedisVersion pins the Redis version INFO and HELLO report
// to the one docs/commands.md documents, and checks that
// server.Config.RedisVersion (--redis-version) changes both.
func TestAdvertisedRedisVersion(t *testing.T) {
	doc, err := os.ReadFile("../docs/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	m := documentedRedisVersion.FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/commands.md does not say %q", documentedRedisVersion)
	}
	documented := string(m[1])
	if documented != commands.DefaultRedisVersion {
		t.Errorf("docs/commands.md documents %s, commands.DefaultRedisVersion is %s", documented, commands.DefaultRedisVersion)
	}
	for _, c := range []struct {
		name string
		cfg  server.Config
		want string
	}{
		{"default", server.Config{}, documented},
		{"--redis-version 7.4.0", server.Config{RedisVersion: "7.4.0"}, "7.4.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, addr := servertest.Start(t, c.cfg)
			secs, _ := parseInfo(t, info(t, addr, "server"))
			if got := secs["Server"].values["redis_version"]; got != c.want {
				t.Errorf("INFO redis_version %q, want %q", got, c.want)
			}
			conn := resptest.MustDial(t, addr)
			for _, proto := range []string{"2", "3"} {
				hello := conn.MustDo(t, "HELLO", proto)
				got := ""
				for i := 0; i+1 < len(hello.Elems); i += 2 {
					if hello.Elems[i].Str == "version" {
						got = hello.Elems[i+1].Str
					}
				}
				if got != c.want {
					t.Errorf("HELLO %s version %q, want %q (reply %v)", proto, got, c.want, hello)
				}
			}
		})
	}
}
