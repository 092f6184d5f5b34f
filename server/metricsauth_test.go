package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// TestMetricsBasicAuth: with --metrics-user and --metrics-password,
// /metrics and the dashboard answer 401 with a challenge unless the
// request carries the pair; the probes stay open. CONFIG GET masks the
// password.
func TestMetricsBasicAuth(t *testing.T) {
	srv, addr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler,
		MetricsUser: "ops", MetricsPassword: "s3cret"})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if got := rdb.ConfigGet(context.Background(), "metrics-*").Val(); got["metrics-user"] != "ops" || got["metrics-password"] != "********" {
		t.Errorf("CONFIG GET metrics-*: %v, want the user and the password masked", got)
	}
	base := "http://" + srv.MetricsAddr().String()
	do := func(path, user, pass string, withAuth bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if withAuth {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/metrics", "/dashboard", "/dashboard/state.json", "/nosuch"} {
		for _, c := range []struct {
			name, user, pass string
			auth             bool
		}{{"no credentials", "", "", false}, {"wrong password", "ops", "s3cre", true}, {"wrong user", "op", "s3cret", true},
			{"password as user", "s3cret", "ops", true}, {"empty", "", "", true}} {
			resp := do(path, c.user, c.pass, c.auth)
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), `Basic realm="cellserver metrics"`) {
				t.Errorf("%s, %s: %d, WWW-Authenticate %q; want 401 with a Basic challenge", path, c.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	for path, code := range map[string]int{"/metrics": 200, "/dashboard": 200, "/dashboard/state.json": 200, "/nosuch": 404} {
		if resp := do(path, "ops", "s3cret", true); resp.StatusCode != code {
			t.Errorf("%s with the credentials: %d, want %d", path, resp.StatusCode, code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp := do(path, "", "", false); resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("%s asks for credentials; the probes stay open", path)
		}
	}
}

// TestMetricsAuthConfig: the user and the password go together.
func TestMetricsAuthConfig(t *testing.T) {
	for _, c := range []server.Config{{MetricsUser: "ops"}, {MetricsPassword: "pw"}, {MetricsUser: "a:b", MetricsPassword: "pw"}} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "metrics-") {
			t.Errorf("%+v: Validate = %v, want a metrics-user/metrics-password error", c, err)
		}
	}
	if err := (server.Config{MetricsUser: "ops", MetricsPassword: "pw"}).Validate(); err != nil {
		t.Errorf("both set: %v", err)
	}
}

// TestMetricsACLUsers: with --metrics-acl, an ACL user that has a password
// and may run INFO gets in; one that may not gets 403; a wrong password,
// a disabled user and a nopass user (the default user without
// --requirepass) get 401. The --metrics-user pair still works beside.
func TestMetricsACLUsers(t *testing.T) {
	for _, withPair := range []bool{false, true} {
		cfg := server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler, MetricsACL: true}
		if withPair {
			cfg.MetricsUser, cfg.MetricsPassword = "ops", "s3cret"
		}
		srv, addr := servertest.Start(t, cfg)
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		ctx := context.Background()
		for _, rule := range [][]any{
			{"ACL", "SETUSER", "admin", "on", ">adminpw", "~*", "+@all"},
			{"ACL", "SETUSER", "reader", "on", ">readerpw", "-@all", "+info"},
			{"ACL", "SETUSER", "team", "on", ">teampw", "~team:*", "-@all", "+@rate_limit"},
			{"ACL", "SETUSER", "gone", "off", ">gonepw", "+@all"},
			{"ACL", "SETUSER", "open", "on", "nopass", "+@all"},
		} {
			if err := rdb.Do(ctx, rule...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		base := "http://" + srv.MetricsAddr().String()
		for _, c := range []struct {
			user, pass string
			code       int
		}{
			{"admin", "adminpw", 200}, {"reader", "readerpw", 200}, {"team", "teampw", 403},
			{"admin", "wrong", 401}, {"gone", "gonepw", 401}, {"open", "anything", 401}, {"default", "", 401},
			{"nosuch", "x", 401}, {"ops", "s3cret", map[bool]int{false: 401, true: 200}[withPair]},
		} {
			for _, path := range []string{"/metrics", "/dashboard/state.json"} {
				req, _ := http.NewRequest("GET", base+path, nil)
				req.SetBasicAuth(c.user, c.pass)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != c.code || (c.code == 401) != (resp.Header.Get("WWW-Authenticate") != "") {
					t.Errorf("pair %v, %s as %s: %d (WWW-Authenticate %q), want %d", withPair, path, c.user, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), c.code)
				}
			}
		}
	}
}
