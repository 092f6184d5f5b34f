package commands_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
)

// mustReply sends args on c and fails unless the reply, encoded, is want.
func mustReply(t *testing.T, c *resptest.Conn, want string, args ...string) {
	t.Helper()
	v, err := c.Do(args...)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	if got := string(v.Encode(nil)); got != want {
		t.Fatalf("%q: %q, want %q", args, got, want)
	}
}

// TestACLDelUserDisconnects: ACL DELUSER closes the connections of the
// user it removes (Redis's ACLFreeUserAndKillClients), the caller's own
// after its reply; the default user's connections stay.
func TestACLDelUserDisconnects(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	admin := resptest.MustDial(t, addr)
	mustReply(t, admin, "+OK\r\n", "ACL", "SETUSER", "u", "on", ">pw", "+@all", "~*")
	u1, u2, other := resptest.MustDial(t, addr), resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	mustReply(t, u1, "+OK\r\n", "AUTH", "u", "pw")
	mustReply(t, admin, ":1\r\n", "CLIENT", "KILL", "USER", "u", "SKIPME", "yes")
	if closed, err := u1.Closed(); !closed {
		t.Fatalf("CLIENT KILL USER u: its connection is open (%v)", err)
	}
	mustReply(t, admin, "-ERR No such user 'nobody'\r\n", "CLIENT", "KILL", "USER", "nobody")
	mustReply(t, u2, "+OK\r\n", "AUTH", "u", "pw")
	mustReply(t, u2, "$1\r\nu\r\n", "ACL", "WHOAMI")
	mustReply(t, u2, ":1\r\n", "ACL", "DELUSER", "u")
	if closed, err := u2.Closed(); !closed {
		t.Fatalf("ACL DELUSER u, sent by u: the connection is open after the reply (%v)", err)
	}
	mustReply(t, other, "+PONG\r\n", "PING")
	mustReply(t, admin, "*1\r\n$7\r\ndefault\r\n", "ACL", "USERS")
}

// TestACLChannelLossDisconnects: a subscribed client whose user loses
// the permission of one of its channels or patterns is disconnected, as
// Redis 7.0's ACLKillPubsubClientsIfNeeded does; a change that keeps its
// channels leaves it connected.
func TestACLChannelLossDisconnects(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	admin := resptest.MustDial(t, addr)
	mustReply(t, admin, "+OK\r\n", "ACL", "SETUSER", "s", "on", "nopass", "+@all", "~*", "&news.*", "&sport")
	sub, psub := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	mustReply(t, sub, "+OK\r\n", "AUTH", "s", "x")
	mustReply(t, psub, "+OK\r\n", "AUTH", "s", "x")
	mustReply(t, sub, "*3\r\n$9\r\nsubscribe\r\n$6\r\nnews.1\r\n:1\r\n", "SUBSCRIBE", "news.1")
	mustReply(t, psub, "*3\r\n$10\r\npsubscribe\r\n$5\r\nsport\r\n:1\r\n", "PSUBSCRIBE", "sport")
	mustReply(t, psub, "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n", "PSUBSCRIBE", "news.1")
	// A superset keeps everyone.
	mustReply(t, admin, "+OK\r\n", "ACL", "SETUSER", "s", "&more")
	mustReply(t, admin, ":1\r\n", "PUBLISH", "news.1", "m")
	v, err := sub.Read()
	if err != nil || v.Kind != '*' || len(v.Elems) != 3 || v.Elems[2].Str != "m" {
		t.Fatalf("message after a wider rule: %v %v", v, err)
	}
	// sport goes: the pattern subscriber is closed, the other stays.
	mustReply(t, admin, "+OK\r\n", "ACL", "SETUSER", "s", "resetchannels", "&news.*")
	if closed, err := psub.Closed(); !closed {
		t.Fatalf("the PSUBSCRIBE sport client is open after losing &sport (%v)", err)
	}
	mustReply(t, admin, ":1\r\n", "PUBLISH", "news.1", "m2")
	if v, err := sub.Read(); err != nil || len(v.Elems) != 3 || v.Elems[2].Str != "m2" {
		t.Fatalf("the news.1 subscriber: %v %v", v, err)
	}
	mustReply(t, admin, "+OK\r\n", "ACL", "SETUSER", "s", "resetchannels")
	if closed, err := sub.Closed(); !closed {
		t.Fatalf("the news.1 subscriber is open after resetchannels (%v)", err)
	}
}

// TestACLFileLoadSave: the aclfile is loaded at start; ACL SAVE writes
// every user and ACL LOAD reads them back; a file with an error changes
// nothing and answers Redis's error; a good one replaces every user and
// closes the connections of the replaced ones.
func TestACLFileLoadSave(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "users.acl")
	if err := os.WriteFile(file, []byte("user alice on >pw ~a:* +get\n\nuser default on nopass ~* &* +@all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := servertest.Start(t, server.Config{ACLFile: file})
	c := resptest.MustDial(t, addr)
	mustReply(t, c, "*2\r\n$5\r\nalice\r\n$7\r\ndefault\r\n", "ACL", "USERS")
	alice := resptest.MustDial(t, addr)
	mustReply(t, alice, "+OK\r\n", "AUTH", "alice", "pw")
	mustReply(t, c, "+OK\r\n", "ACL", "SETUSER", "bob", "on", "#"+strings.Repeat("ab", 32), "%R~b:*", "&ch", "+@read")
	mustReply(t, c, "+OK\r\n", "ACL", "SAVE")
	saved, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := "user alice on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~a:* resetchannels -@all +get\n" +
		"user bob on #" + strings.Repeat("ab", 32) + " %R~b:* resetchannels &ch -@all +@read\n" +
		"user default on nopass ~* &* +@all\n"
	if string(saved) != want {
		t.Fatalf("ACL SAVE wrote\n%s\nwant\n%s", saved, want)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	// A bad file: Redis's error, nothing changes.
	bad := "user carol on +nosuch\nnot a user line\nuser bob ~x ~*\nuser alice off\nuser alice on\n"
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr := "-ERR " + file + ":1: Error in applying operation '+nosuch': Unknown command or category name in ACL. " +
		file + ":2 should start with user keyword followed by the username. " +
		"WARNING: Duplicate user 'alice' found on line 5. " +
		"WARNING: ACL errors detected, no change to the previously active ACL rules was performed\r\n"
	mustReply(t, c, wantErr, "ACL", "LOAD")
	mustReply(t, c, "*3\r\n$5\r\nalice\r\n$3\r\nbob\r\n$7\r\ndefault\r\n", "ACL", "USERS")
	mustReply(t, alice, "$-1\r\n", "GET", "a:1")
	// The saved file again, then a new one without alice.
	if err := os.WriteFile(file, []byte("user carol on nopass ~c:* +@all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustReply(t, c, "+OK\r\n", "ACL", "LOAD")
	mustReply(t, c, "*2\r\n$5\r\ncarol\r\n$7\r\ndefault\r\n", "ACL", "USERS")
	if closed, err := alice.Closed(); !closed {
		t.Fatalf("alice's connection is open after ACL LOAD replaced the users (%v)", err)
	}
	// The default user, absent from the file, is back to its initial rules.
	mustReply(t, c, "*2\r\n$45\r\nuser carol on nopass ~c:* resetchannels +@all\r\n$34\r\nuser default on nopass ~* &* +@all\r\n", "ACL", "LIST")
	os.Remove(file)
	mustReply(t, c, "-ERR Error loading ACLs, opening file '"+file+"': No such file or directory\r\n", "ACL", "LOAD")
}

// TestACLStartupConfig: users from the configuration ("user" lines) load
// at start; with an aclfile as well, or with a bad rule, the server does
// not start, as Redis.
func TestACLStartupConfig(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{Users: []string{"team on >pw ~team:* +@rate_limit", "default on nopass ~* &* +@all -flushall"}})
	c := resptest.MustDial(t, addr)
	mustReply(t, c, "-NOPERM this user has no permissions to run the 'flushall' command\r\n", "FLUSHALL")
	mustReply(t, c, "+OK\r\n", "AUTH", "team", "pw")
	if v := c.MustDo(t, "CL.THROTTLE", "team:k", "1", "1", "1"); v.Kind != '*' {
		t.Fatalf("CL.THROTTLE as team: %v", v)
	}
	for _, cfg := range []server.Config{
		{Users: []string{"a on"}, ACLFile: filepath.Join(t.TempDir(), "x.acl")},
		{Users: []string{"a on +nosuch"}},
		{Users: []string{"a on", "a off"}},
		{ACLFile: filepath.Join(t.TempDir(), "missing.acl")},
	} {
		cfg.Addr = "127.0.0.1:0"
		if _, err := server.New(cfg); err == nil {
			t.Errorf("server.New(Users %q, ACLFile %q): no error", cfg.Users, cfg.ACLFile)
		}
	}
}

// TestACLLimits: a pattern past the length limit, a user past the
// pattern limit and ACL SETUSER past the rule limit are refused before
// anything is stored; the ACL LOG keeps acllog-max-len entries.
func TestACLLimits(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{ACLLogMaxLen: 3})
	c := resptest.MustDial(t, addr)
	long := "~" + strings.Repeat("k", 1025)
	mustReply(t, c, "-ERR Error in ACL SETUSER modifier '"+long+"': Pattern too long (the limit is 1024 bytes)\r\n", "ACL", "SETUSER", "u", long)
	mustReply(t, c, "$-1\r\n", "ACL", "GETUSER", "u")
	longFirst := "+select|" + strings.Repeat("0", 1025)
	mustReply(t, c, "-ERR Error in ACL SETUSER modifier '"+longFirst+"': Pattern too long (the limit is 1024 bytes)\r\n", "ACL", "SETUSER", "u", longFirst)
	sel := "(" + strings.Repeat("+get ", 1025) + ")"
	if v := c.MustDo(t, "ACL", "SETUSER", "u", sel); v.Kind != '-' || !strings.Contains(v.Str, "Too many rules in a selector (the limit is 1024)") {
		t.Errorf("a selector of 1025 rules: %v", v)
	}
	mustReply(t, c, "$-1\r\n", "ACL", "GETUSER", "u")
	args := []string{"ACL", "SETUSER", "u"}
	for i := range 1024 {
		args = append(args, "~p"+strconv.Itoa(i))
	}
	mustReply(t, c, "+OK\r\n", args...)
	mustReply(t, c, "-ERR Error in ACL SETUSER modifier '&one-more': Too many key or channel patterns (the limit is 1024 per user)\r\n", "ACL", "SETUSER", "u", "&one-more")
	mustReply(t, c, "-ERR Too many ACL rules (the limit is 1024 per call)\r\n", append(args[:3:3], append(args[3:], "on")...)...)
	mustReply(t, c, "+OK\r\n", "ACL", "SETUSER", "v", "on", "nopass", "-@all")
	v := resptest.MustDial(t, addr)
	mustReply(t, v, "+OK\r\n", "AUTH", "v", "x")
	for _, cmd := range []string{"GET", "TTL", "TYPE", "DEL", "EXISTS"} {
		v.MustDo(t, cmd, "k")
	}
	log := c.MustDo(t, "ACL", "LOG", "100")
	if len(log.Elems) != 3 {
		t.Fatalf("ACL LOG holds %d entries, want acllog-max-len 3", len(log.Elems))
	}
	mustReply(t, c, "*2\r\n$7\r\naclfile\r\n$0\r\n\r\n", "CONFIG", "GET", "aclfile")
	mustReply(t, c, "*2\r\n$14\r\nacllog-max-len\r\n$1\r\n3\r\n", "CONFIG", "GET", "acllog-max-len")
}

// TestACLHelloAuth: HELLO ... AUTH user pass switches the user and the
// protocol at once; CLIENT LIST shows the user; RESET goes back to the
// default user; a new connection is authenticated when the default user
// is nopass and on (Redis's authRequired).
func TestACLHelloAuth(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{Password: "top"})
	c := resptest.MustDial(t, addr)
	mustReply(t, c, "-NOAUTH Authentication required.\r\n", "ACL", "WHOAMI")
	mustReply(t, c, "+OK\r\n", "AUTH", "top")
	mustReply(t, c, "+OK\r\n", "ACL", "SETUSER", "h", "on", ">hp", "+@all", "~*")
	h := resptest.MustDial(t, addr)
	if v := h.MustDo(t, "HELLO", "3", "AUTH", "h", "hp"); v.Kind != '%' {
		t.Fatalf("HELLO 3 AUTH h hp: %v", v)
	}
	mustReply(t, h, "$1\r\nh\r\n", "ACL", "WHOAMI")
	if info := h.MustDo(t, "CLIENT", "INFO").Str; !strings.Contains(info, " user=h ") {
		t.Fatalf("CLIENT INFO: %q", info)
	}
	mustReply(t, h, "+RESET\r\n", "RESET")
	mustReply(t, h, "-NOAUTH Authentication required.\r\n", "ACL", "WHOAMI")
	mustReply(t, h, "-WRONGPASS invalid username-password pair or user is disabled.\r\n", "HELLO", "2", "AUTH", "h", "nope")
	mustReply(t, h, "+OK\r\n", "AUTH", "default", "top")
	mustReply(t, h, "$7\r\ndefault\r\n", "ACL", "WHOAMI")
	// A nopass default user lets new connections in, unless it is off.
	mustReply(t, h, "+OK\r\n", "ACL", "SETUSER", "default", "nopass")
	mustReply(t, resptest.MustDial(t, addr), "+PONG\r\n", "PING")
	mustReply(t, h, "+OK\r\n", "ACL", "SETUSER", "default", "off")
	mustReply(t, resptest.MustDial(t, addr), "-NOAUTH Authentication required.\r\n", "PING")
}

// TestACLDefaultUserAllocs: the default user's commands and a confined
// user's allowed ones allocate nothing for the permission check.
func TestACLDefaultUserAllocs(t *testing.T) {
	for _, confined := range []bool{false, true} {
		srv, conn := aclBenchServer(t, confined)
		args := [][]byte{[]byte("CL.THROTTLE"), []byte("team:k"), []byte("15"), []byte("30"), []byte("60")}
		srv.ServeRESP(conn, args)
		n := testing.AllocsPerRun(1000, func() {
			conn.Out = conn.Out[:0]
			srv.ServeRESP(conn, args)
		})
		if n != 0 {
			t.Errorf("confined %v: %v allocations per CL.THROTTLE", confined, n)
		}
		if !limiterReply(conn.Out) {
			t.Fatalf("confined %v: reply %q", confined, conn.Out)
		}
	}
}

// aclBenchServer returns a service and a connection authenticated as the
// default user, or as a user confined to team:* with +@rate_limit.
func aclBenchServer(tb testing.TB, confined bool) (*commands.Service, *resp.Conn) {
	srv, err := commands.New(commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	conn := new(resp.Conn)
	srv.Open(conn)
	tb.Cleanup(func() { srv.Close(conn) })
	if confined {
		for _, cmd := range [][]string{
			{"ACL", "SETUSER", "team", "on", ">pw", "resetkeys", "~team:*", "-@all", "+@rate_limit"},
			{"AUTH", "team", "pw"},
		} {
			var args [][]byte
			for _, a := range cmd {
				args = append(args, []byte(a))
			}
			conn.Out = conn.Out[:0]
			srv.ServeRESP(conn, args)
			if string(conn.Out) != "+OK\r\n" {
				tb.Fatalf("%q: %q", cmd, conn.Out)
			}
		}
	}
	return srv, conn
}

// BenchmarkThrottleACL is CL.THROTTLE on one key as the default user
// (every command, key and channel: one branch) and as a user confined to
// team:* with +@rate_limit (a bit test and a glob match per key).
func BenchmarkThrottleACL(b *testing.B) {
	for _, tc := range []struct {
		name     string
		confined bool
	}{{"default", false}, {"confined", true}} {
		b.Run(tc.name, func(b *testing.B) {
			srv, conn := aclBenchServer(b, tc.confined)
			args := [][]byte{[]byte("CL.THROTTLE"), []byte("team:k"), []byte("15"), []byte("30"), []byte("60")}
			b.ReportAllocs()
			for b.Loop() {
				conn.Out = conn.Out[:0]
				srv.ServeRESP(conn, args)
			}
			if !limiterReply(conn.Out) {
				b.Fatalf("reply %q", conn.Out)
			}
		})
	}
}

// TestACLConcurrentChanges: rules changed, users deleted and recreated
// while their clients run commands and authenticate: every reply is one
// of the expected ones (run with -race: no data race).
func TestACLConcurrentChanges(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	admin := resptest.MustDial(t, addr)
	mustReply(t, admin, "+OK\r\n", "ACL", "SETUSER", "u", "on", "nopass", "+@all", "~*")
	done := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			c, err := resptest.Dial(addr)
			if err != nil {
				errs <- err
				return
			}
			defer func() { c.Close() }()
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				v, err := c.Do("AUTH", "u", "x")
				if err != nil { // deleted while authenticated: closed
					if c, err = resptest.Dial(addr); err != nil {
						errs <- err
						return
					}
					continue
				}
				if v.Kind == '-' && !strings.HasPrefix(v.Str, "WRONGPASS") {
					errs <- fmt.Errorf("AUTH: %v", v)
					return
				}
				v, err = c.Do("GET", "k")
				if err != nil {
					if c, err = resptest.Dial(addr); err != nil {
						errs <- err
						return
					}
					continue
				}
				if !(v.Kind == '$' || v.Kind == '-' && strings.HasPrefix(v.Str, "NOPERM this user has no permissions to run the 'get' command")) {
					errs <- fmt.Errorf("GET: %v", v)
					return
				}
			}
		}()
	}
	for i := range 300 {
		switch i % 3 {
		case 0:
			admin.MustDo(t, "ACL", "SETUSER", "u", "-get")
		case 1:
			admin.MustDo(t, "ACL", "SETUSER", "u", "on", "nopass", "+@all", "~*")
		case 2:
			admin.MustDo(t, "ACL", "DELUSER", "u")
			admin.MustDo(t, "ACL", "SETUSER", "u", "on", "nopass", "+@all", "~*")
		}
	}
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
