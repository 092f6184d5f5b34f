package envoyrls_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/server"
)

func basic(user, pass string) metadata.MD {
	return metadata.Pairs("authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
}

func TestParseBasic(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		in       string
		user     envoyrls.User
		ok, fail bool
	}{
		{"Basic " + enc("team-a:pw"), envoyrls.User{Name: "team-a", Password: "pw"}, true, false},
		{"basic " + enc("team-a:p:w"), envoyrls.User{Name: "team-a", Password: "p:w"}, true, false}, // the first colon splits
		{"Basic " + enc("team-a:"), envoyrls.User{Name: "team-a"}, true, false},
		{"Basic " + enc("team-a"), envoyrls.User{}, true, true}, // no colon
		{"Basic " + enc(":pw"), envoyrls.User{}, true, true},    // no user
		{"Basic !!!", envoyrls.User{}, true, true},              // not base64
		{"Bearer s3cret", envoyrls.User{}, false, false},        // not Basic
		{"Basi", envoyrls.User{}, false, false},
	} {
		u, ok, err := envoyrls.ParseBasic(tc.in)
		if u != tc.user || ok != tc.ok || (err != nil) != tc.fail {
			t.Errorf("ParseBasic(%q) = %+v %v %v", tc.in, u, ok, err)
		}
		if err != nil && status.Code(err) != codes.Unauthenticated {
			t.Errorf("ParseBasic(%q): %v, want Unauthenticated", tc.in, err)
		}
	}
}

// TestBasicDefaultUser: "authorization: Basic base64(default:<password>)"
// works as the Bearer token does (the server's AUTH default <password>);
// a wrong password, an unknown user or malformed credentials are
// Unauthenticated, and Bearer keeps working.
func TestBasicDefaultUser(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.Password = "s3cret" })
	req := request("basic", 1, []string{"key1", "a"})
	call := func(md metadata.MD) (uint32, error) {
		got, err := h.client.ShouldRateLimit(metadata.NewOutgoingContext(context.Background(), md), req)
		if err != nil {
			return 0, err
		}
		return got.Statuses[0].LimitRemaining, nil
	}
	if n, err := call(basic("default", "s3cret")); err != nil || n != 49 {
		t.Fatalf("Basic default: %d %v", n, err)
	}
	for _, md := range []metadata.MD{basic("default", "wrong"), basic("nobody", "s3cret"),
		metadata.Pairs("authorization", "Basic xx"), metadata.Pairs("authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("nocolon")))} {
		_, err := call(md)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%v: %v, want Unauthenticated", md, err)
		}
	}
	if _, err := call(basic("default", "wrong")); !strings.Contains(status.Convert(err).Message(), "WRONGPASS") {
		t.Errorf("wrong password: %v, want WRONGPASS in the message", err)
	}
	if n, err := call(metadata.Pairs("authorization", "Bearer s3cret")); err != nil || n != 48 {
		t.Fatalf("Bearer: %d %v", n, err)
	}
	if n := h.fd.Users().Len(); n != 1 {
		t.Errorf("%d users' clients open, want 1 (default)", n)
	}
	if st := h.fd.Service().Stats(); st.Requests != 2 {
		t.Errorf("the service answered %d requests, want 2 (the refused ones never reached it)", st.Requests)
	}
}

// TestBasicRefusedBeforeRead: calls whose Basic credentials are refused
// are refused on their headers, before the server reads their 4 MB
// message (as calls without the token: TestUnauthenticatedCallNotRead).
func TestBasicRefusedBeforeRead(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.Password = "s3cret" })
	var written atomic.Int64
	c := dialCounting(t, h.srv.RLSAddr().String(), &written)
	const calls, size = 6, 4_000_000
	req := request("basic", 1, []string{"key1", strings.Repeat("x", size)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			md := basic("default", "wrong")
			if i%2 == 0 {
				md = metadata.Pairs("authorization", "Basic ???")
			}
			_, errs[i] = c.ShouldRateLimit(metadata.NewOutgoingContext(ctx, md), req)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("call %d: %v, want Unauthenticated", i, err)
		}
	}
	if n, max := written.Load(), int64(calls*(envoyrls.StreamWindowBytes+16<<10)); n > max {
		t.Fatalf("the client wrote %d bytes for %d refused calls of %d bytes: the server read their messages (want at most %d)", n, calls, size, max)
	}
	if st := h.fd.Service().Stats(); st.Requests != 0 {
		t.Fatalf("the service answered %d requests", st.Requests)
	}
}

// startACL is startRLS with a password and ACL users team-a (keys of
// the domain basic only) and team-b (keys of the domain other only),
// both +@rate_limit and nothing else; it skips without ACL users.
func startACL(t *testing.T) (*rlsHarness, *redis.Client) {
	t.Helper()
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.Password = "s3cret" })
	admin := redis.NewClient(&redis.Options{Addr: h.resp, Password: "s3cret"})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	err := admin.Do(ctx, "ACL", "SETUSER", "team-a", "on", ">pa", "~rls:basic:*", "+@rate_limit").Err()
	if err != nil && strings.HasPrefix(err.Error(), "ERR unknown command") {
		t.Skipf("no ACL users in this build: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "team-b", "on", ">pb", "~rls:other:*", "+@rate_limit").Err(); err != nil {
		t.Fatal(err)
	}
	return h, admin
}

// TestUserPermissions: a call with Basic credentials runs as that user:
// team-a charges the domain basic's counters; team-b, confined to
// rls:other:*, is PermissionDenied with the server's NOPERM (and the
// counter untouched, the refusal in ACL LOG); a password changed on the
// server stops working once UserRecheck has passed.
func TestUserPermissions(t *testing.T) {
	h, admin := startACL(t)
	ctx := context.Background()
	h.fd.Users().SetUserLimits(envoyrls.MaxUsers, 0) // check the password on every call
	req := request("basic", 1, []string{"key1", "a"})
	call := func(md metadata.MD) (uint32, error) {
		got, err := h.client.ShouldRateLimit(metadata.NewOutgoingContext(ctx, md), req)
		if err != nil {
			return 0, err
		}
		return got.Statuses[0].LimitRemaining, nil
	}
	if n, err := call(basic("team-a", "pa")); err != nil || n != 49 {
		t.Fatalf("team-a: %d %v", n, err)
	}
	_, err := call(basic("team-b", "pb"))
	want := `user "team-b" may not charge the counter rls:basic:key1=a: NOPERM this user has no permissions to access one of the keys used as arguments`
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != want {
		t.Errorf("team-b: %v\nwant PermissionDenied %q", err, want)
	}
	if n, err := call(basic("team-a", "pa")); err != nil || n != 48 {
		t.Fatalf("team-a after team-b's refusal: %d %v (team-b charged the counter?)", n, err)
	}
	if objs := aclLogObjects(t, admin); len(objs) != 1 || objs[0] != "team-b key rls:basic:key1=a" {
		t.Errorf("ACL LOG: %q, want team-b's refusal on rls:basic:key1=a", objs)
	}

	if err := admin.Do(ctx, "ACL", "SETUSER", "team-a", "resetpass", ">pa2").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := call(basic("team-a", "pa")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("team-a's old password after the change: %v, want Unauthenticated", err)
	}
	if n, err := call(basic("team-a", "pa2")); err != nil || n != 47 {
		t.Errorf("team-a's new password: %d %v", n, err)
	}
}

// aclLogObjects returns "username reason object" of each ACL LOG entry.
func aclLogObjects(t *testing.T, admin *redis.Client) []string {
	t.Helper()
	entries, err := admin.Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	var out []string
	for _, e := range entries {
		m := map[string]any{}
		switch x := e.(type) {
		case map[any]any: // RESP3
			for k, v := range x {
				m[k.(string)] = v
			}
		case []any: // RESP2
			for i := 0; i+1 < len(x); i += 2 {
				m[x[i].(string)] = x[i+1]
			}
		}
		out = append(out, fmt.Sprintf("%v %v %v", m["username"], m["reason"], m["object"]))
	}
	return out
}

// TestUserClientsBound: the front door keeps a client for at most
// MaxUsers users (here 2: the least recently used one's is closed for a
// third user), each with at most UserPoolSize connections to the RESP
// port however many of its calls run at once.
func TestUserClientsBound(t *testing.T) {
	h, admin := startACL(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "team-c", "on", ">pc", "~rls:basic:*", "+@rate_limit").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "team-b", "~rls:basic:*").Err(); err != nil {
		t.Fatal(err)
	}
	h.fd.Users().SetUserLimits(2, envoyrls.UserRecheck)
	users := [][2]string{{"team-a", "pa"}, {"team-b", "pb"}, {"team-c", "pc"}}
	const perUser = 32
	for round := range 2 {
		for _, u := range users {
			var wg sync.WaitGroup
			errs := make(chan error, perUser)
			for i := range perUser {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := request("basic", 1, []string{"key1", fmt.Sprintf("%s-%d-%d", u[0], round, i)})
					if _, err := h.client.ShouldRateLimit(metadata.NewOutgoingContext(ctx, basic(u[0], u[1])), req); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("%s: %v", u[0], err)
			}
			if n := h.fd.Users().Len(); n > 2 {
				t.Fatalf("%d users' clients open after %s's calls, want at most 2", n, u[0])
			}
			conns := func() map[string]int {
				list, err := admin.ClientList(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				m := map[string]int{}
				for _, line := range strings.Split(list, "\n") {
					for _, f := range strings.Fields(line) {
						if name, ok := strings.CutPrefix(f, "user="); ok {
							m[name]++
						}
					}
				}
				return m
			}
			if m := conns(); m[u[0]] > envoyrls.UserPoolSize || m[u[0]] == 0 {
				t.Errorf("%s: %d connections after %d calls at once, want 1..%d (CLIENT LIST users %v)", u[0], m[u[0]], perUser, envoyrls.UserPoolSize, m)
			}
			// The evicted user's connections go once the server sees them closed.
			testwait.For(t, 10*time.Second, "the users' connections at most 2*UserPoolSize", func() (bool, string) {
				m, open := conns(), 0
				for _, x := range users {
					open += m[x[0]]
				}
				return open <= 2*envoyrls.UserPoolSize, fmt.Sprintf("CLIENT LIST users %v", m)
			})
		}
	}
}

// TestUserDeletedAndRecreated: a user removed while its in-process clients
// sit idle in the front door is refused as Unauthenticated at its next
// call (not Unavailable, which Envoy's failure_mode_allow would let
// through), and once created again with the same password its calls are
// decided again, on new clients.
func TestUserDeletedAndRecreated(t *testing.T) {
	h, admin := startACL(t)
	ctx := context.Background()
	req := request("basic", 1, []string{"key1", "a"})
	call := func() (uint32, error) {
		got, err := h.client.ShouldRateLimit(metadata.NewOutgoingContext(ctx, basic("team-a", "pa")), req)
		if err != nil {
			return 0, err
		}
		return got.Statuses[0].LimitRemaining, nil
	}
	if n, err := call(); err != nil || n != 49 {
		t.Fatalf("team-a: %d %v", n, err)
	}
	if err := admin.Do(ctx, "ACL", "DELUSER", "team-a").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := call(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("team-a after ACL DELUSER: %v, want Unauthenticated", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "team-a", "on", ">pa", "~rls:basic:*", "+@rate_limit").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := call(); err != nil || n != 48 {
		t.Fatalf("team-a created again: %d %v", n, err)
	}
}
