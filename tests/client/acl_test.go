package clienttests

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// TestACLUser: a Client over a go-redis client whose Options carry
// Username and Password runs as that ACL user: its own keys work, a key
// outside its patterns is an *Error with Code NOPERM (NoPermission), and
// a wrong password is WRONGPASS from the connection's AUTH.
func TestACLUser(t *testing.T) {
	clk := servertest.NewClock(t0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { admin.Close() })
	err := admin.Do(ctx, "ACL", "SETUSER", "team-a", "on", ">secret", "~a:*", "+@rate_limit", "+@connection").Err()
	if err != nil && strings.HasPrefix(err.Error(), "ERR unknown command") {
		t.Skipf("no ACL users in this build: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	newClient := func(pass string) *client.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Username: "team-a", Password: pass, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		return client.New(rdb)
	}
	c := newClient("secret")
	r, err := c.Throttle(ctx, "a:k", 4, client.PerSecond(1), 1)
	check(t, "own key", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: s})

	_, err = c.Throttle(ctx, "b:k", 4, client.PerSecond(1), 1)
	var e *client.Error
	if !errors.As(err, &e) || !e.NoPermission() || e.BadArgument() ||
		err.Error() != "client: CL.THROTTLE: NOPERM this user has no permissions to access one of the keys used as arguments" {
		t.Errorf("other key: %v (%#v)", err, e)
	}
	_, err = c.Fixed(ctx, "b:k", 5, s, 1)
	if !errors.As(err, &e) || !e.NoPermission() || e.Command != "CL.FIXED" {
		t.Errorf("other key, CL.FIXED: %v", err)
	}
	if n, err := admin.Exists(ctx, "b:k").Result(); err != nil || n != 0 {
		t.Errorf("b:k exists after the refusals: %d %v", n, err)
	}

	// +@connection covers what go-redis sends when it connects (HELLO,
	// CLIENT SETINFO, CLIENT MAINT_NOTIFICATIONS): the only refusals
	// logged are the two calls on b:k.
	log, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil || len(log) != 1 {
		t.Fatalf("ACL LOG: %v %v, want one entry", log, err)
	}
	if e, ok := log[0].(map[any]any); !ok || e["reason"] != "key" || e["object"] != "b:k" || e["count"] != int64(2) || e["username"] != "team-a" {
		t.Errorf("ACL LOG entry %v, want team-a's 2 refusals on b:k", log[0])
	}

	_, err = newClient("wrong").Throttle(ctx, "a:k", 4, client.PerSecond(1), 1)
	if !errors.As(err, &e) || e.Code != "WRONGPASS" || e.NoPermission() {
		t.Errorf("wrong password: %v", err)
	}
}
